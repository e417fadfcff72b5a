# Warnings, PRIVATE to our own targets and applied per language: -Wpedantic would break every .cu
# file through the line directives nvcc generates, so .cu files get nvcc's own switch instead.
function(mgm_set_warnings target)
  set(cxx_warnings
      -Wall
      -Wextra
      -Wpedantic
      -Wshadow
      -Wnon-virtual-dtor
      -Wold-style-cast
      -Wcast-align
      -Woverloaded-virtual
      -Wimplicit-fallthrough)
  set(cuda_warnings)
  if(MGM_WERROR)
    list(APPEND cxx_warnings -Werror)
    list(APPEND cuda_warnings -Werror=all-warnings)
  endif()
  target_compile_options(${target} PRIVATE "$<$<COMPILE_LANGUAGE:CXX>:${cxx_warnings}>"
                                           "$<$<COMPILE_LANGUAGE:CUDA>:${cuda_warnings}>")
endfunction()
