# Install rules and the build-tree export, so find_package(MultiGpuMem) works against an install
# prefix and against the build folder (MultiGpuMem_DIR=<build>).
include(CMakePackageConfigHelpers)

set(MGM_INSTALL_CMAKEDIR "${CMAKE_INSTALL_LIBDIR}/cmake/MultiGpuMem" CACHE STRING "Where the CMake package goes")

set(MGM_LAYER_TARGETS "")
foreach(layer IN LISTS MGM_LAYERS)
  list(APPEND MGM_LAYER_TARGETS mgm_${layer})
endforeach()
install(
  TARGETS multigpumem ${MGM_LAYER_TARGETS} multigpumem_c
  EXPORT MultiGpuMemTargets
  ARCHIVE DESTINATION "${CMAKE_INSTALL_LIBDIR}"
  LIBRARY DESTINATION "${CMAKE_INSTALL_LIBDIR}"
  INCLUDES DESTINATION "${CMAKE_INSTALL_INCLUDEDIR}")
install(DIRECTORY include/mgm DESTINATION "${CMAKE_INSTALL_INCLUDEDIR}")
# Prometheus rules (and their promtool test), the Grafana dashboard, the Kubernetes manifests.
install(DIRECTORY deploy/ DESTINATION "${CMAKE_INSTALL_DATADIR}/multigpumem")
install(EXPORT MultiGpuMemTargets NAMESPACE MultiGpuMem:: DESTINATION "${MGM_INSTALL_CMAKEDIR}")

configure_package_config_file(cmake/MultiGpuMemConfig.cmake.in "${PROJECT_BINARY_DIR}/MultiGpuMemConfig.cmake"
                              INSTALL_DESTINATION "${MGM_INSTALL_CMAKEDIR}")
write_basic_package_version_file("${PROJECT_BINARY_DIR}/MultiGpuMemConfigVersion.cmake"
                                 COMPATIBILITY SameMinorVersion)
install(FILES "${PROJECT_BINARY_DIR}/MultiGpuMemConfig.cmake" "${PROJECT_BINARY_DIR}/MultiGpuMemConfigVersion.cmake"
        DESTINATION "${MGM_INSTALL_CMAKEDIR}")

export(EXPORT MultiGpuMemTargets NAMESPACE MultiGpuMem:: FILE "${PROJECT_BINARY_DIR}/MultiGpuMemTargets.cmake")
