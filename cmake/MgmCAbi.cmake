# The C ABI (include/mgm/c/multigpumem.h): libmultigpumem_c.so, a shared library with a SONAME
# that frameworks load by path (PyTorch's CUDAPluggableAllocator, ctypes). It links the library's
# layers statically and exports only its mgm_* symbols. The CUDA runtime is linked statically
# (MGM_STATIC_CUDART), so it needs only the driver: beside a PyTorch wheel built for CUDA 12 (with
# its own libcudart.so.12) it loads without a CUDA 13 runtime installed; both runtimes share the
# driver's contexts, streams and pointers.
add_library(multigpumem_c SHARED src/c/multigpumem_c.cpp)
set_target_properties(multigpumem_c PROPERTIES OUTPUT_NAME multigpumem_c VERSION ${PROJECT_VERSION} SOVERSION 1
                                               CXX_VISIBILITY_PRESET hidden VISIBILITY_INLINES_HIDDEN ON
                                               EXPORT_NAME c MGM_STATIC_CUDART ON)
target_compile_features(multigpumem_c PUBLIC cxx_std_20)
target_include_directories(multigpumem_c PUBLIC "$<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}/include>"
                                                "$<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>")
target_include_directories(multigpumem_c SYSTEM PRIVATE ${MGM_NLOHMANN_JSON_INCLUDE})
target_link_libraries(multigpumem_c PRIVATE "$<BUILD_INTERFACE:mgm_pool;mgm_sim;mgm_allocators>")
# Nothing but the C functions leaves the library (the static layers' symbols stay inside), and
# nothing is left undefined (except under a sanitizer: its runtime comes with the executable).
target_link_options(multigpumem_c PRIVATE "LINKER:--exclude-libs,ALL")
if(NOT MGM_SANITIZE)
  target_link_options(multigpumem_c PRIVATE "LINKER:--no-undefined")
endif()
mgm_set_warnings(multigpumem_c)
add_library(MultiGpuMem::c ALIAS multigpumem_c)

# The Python package (python/multigpumem, pure Python over ctypes): copied into the build tree
# (BUILD/python/multigpumem, which finds BUILD/libmultigpumem_c.so.1 two folders up) and installed
# in MGM_PYTHON_INSTALL_DIR, a folder on Debian's /usr/bin/python3 path for the prefix:
# lib/python3/dist-packages under /usr, lib/python3.X/dist-packages under /usr/local (and any other
# prefix, which then goes on PYTHONPATH). The installed package finds the installed library by
# the relative path written into its _installed.py.
set(mgm_python_default "lib/python3/dist-packages")
if(NOT CMAKE_INSTALL_PREFIX STREQUAL "/usr" AND EXISTS /usr/bin/python3)
  execute_process(COMMAND /usr/bin/python3 -c "import sys; print('%d.%d' % sys.version_info[:2])"
                  OUTPUT_VARIABLE mgm_python_version OUTPUT_STRIP_TRAILING_WHITESPACE RESULT_VARIABLE mgm_python_rc)
  if(mgm_python_rc EQUAL 0 AND mgm_python_version MATCHES "^3\\.[0-9]+$")
    set(mgm_python_default "lib/python${mgm_python_version}/dist-packages")
  endif()
endif()
set(MGM_PYTHON_INSTALL_DIR "${mgm_python_default}" CACHE STRING
    "Where cmake --install puts the multigpumem Python package (relative to the prefix)")
file(RELATIVE_PATH mgm_python_to_lib "/${MGM_PYTHON_INSTALL_DIR}/multigpumem" "/${CMAKE_INSTALL_LIBDIR}")
file(WRITE "${PROJECT_BINARY_DIR}/python-install/_installed.py"
     "# Written by the build: the installed library's folder, relative to this package.\nLIBRARY_DIR = \"${mgm_python_to_lib}\"\n")
install(FILES "${PROJECT_BINARY_DIR}/python-install/_installed.py" DESTINATION "${MGM_PYTHON_INSTALL_DIR}/multigpumem")
file(GLOB MGM_PYTHON_FILES CONFIGURE_DEPENDS "${PROJECT_SOURCE_DIR}/python/multigpumem/*.py")
set(MGM_PYTHON_COPIES "")
foreach(f IN LISTS MGM_PYTHON_FILES)
  get_filename_component(name "${f}" NAME)
  set(out "${PROJECT_BINARY_DIR}/python/multigpumem/${name}")
  add_custom_command(OUTPUT "${out}" COMMAND ${CMAKE_COMMAND} -E copy_if_different "${f}" "${out}" DEPENDS "${f}"
                     COMMENT "multigpumem (Python): ${name}")
  list(APPEND MGM_PYTHON_COPIES "${out}")
endforeach()
# The build tree's copy names the library built beside it (the installed package looks three
# folders up instead; _where.py is not installed).
file(GENERATE OUTPUT "${PROJECT_BINARY_DIR}/python/multigpumem/_where.py"
     CONTENT "# Written by the build: the library of this build tree.\nLIBRARY = \"$<TARGET_FILE:multigpumem_c>\"\n")
add_custom_target(multigpumem_python ALL DEPENDS ${MGM_PYTHON_COPIES} multigpumem_c)
install(DIRECTORY python/multigpumem DESTINATION "${MGM_PYTHON_INSTALL_DIR}" FILES_MATCHING PATTERN "*.py")
