# Sanitizers go on C++ files and the link only, never on .cu files (nvcc does not take them).
if(MGM_SANITIZE)
  list(JOIN MGM_SANITIZE "," mgm_sanitize_list)
  add_compile_options("$<$<COMPILE_LANGUAGE:CXX>:-fsanitize=${mgm_sanitize_list};-fno-omit-frame-pointer;-fno-sanitize-recover=all>")
  add_link_options("-fsanitize=${mgm_sanitize_list}")
endif()

# libFuzzer instruments everything it may reach; only the fuzz targets link its main.
if(MGM_BUILD_FUZZERS)
  add_compile_options("$<$<COMPILE_LANGUAGE:CXX>:-fsanitize=fuzzer-no-link>")
endif()
