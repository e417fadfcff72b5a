# The C ABI (include/mgm/c/multigpumem.h): libmultigpumem_c.so, a shared library with a SONAME
# that frameworks load by path (PyTorch's CUDAPluggableAllocator, ctypes). It links the library's
# layers statically and exports only its mgm_* symbols; the CUDA runtime stays shared, the one
# the framework in the same process uses.
add_library(multigpumem_c SHARED src/c/multigpumem_c.cpp)
set_target_properties(multigpumem_c PROPERTIES OUTPUT_NAME multigpumem_c VERSION ${PROJECT_VERSION} SOVERSION 1
                                               CXX_VISIBILITY_PRESET hidden VISIBILITY_INLINES_HIDDEN ON
                                               EXPORT_NAME c)
target_compile_features(multigpumem_c PUBLIC cxx_std_20)
target_include_directories(multigpumem_c PUBLIC "$<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}/include>"
                                                "$<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>")
target_include_directories(multigpumem_c SYSTEM PRIVATE ${MGM_NLOHMANN_JSON_INCLUDE})
target_link_libraries(multigpumem_c PRIVATE "$<BUILD_INTERFACE:mgm_pool;mgm_sim;mgm_allocators>")
# Nothing but the C functions leaves the library (the static layers' symbols stay inside).
target_link_options(multigpumem_c PRIVATE "LINKER:--exclude-libs,ALL" "LINKER:--no-undefined")
mgm_set_warnings(multigpumem_c)
add_library(MultiGpuMem::c ALIAS multigpumem_c)
