# The library as one target per layer (DESIGN.md §2), each linked only to the layers below it:
# MultiGpuMem::core, ::allocators, ::topology, ::sim, ::pool, ::adaptors, ::discovery,
# ::telemetry, ::trace, ::tracegen, ::partition, ::rebalancing, ::placement, ::interop; and
# MultiGpuMem::multigpumem, the one-stop target that links them all. The includes between them
# are checked by tools/layers/check_layers.py against tools/layers/layers.txt.

set(MGM_LAYERS "")

# The standard headers most of the library's files include, parsed once: parsing them was most of
# each file's compile time (55-75 %, -ftime-report). The core layer compiles them; every other
# layer reuses its precompiled header (they share its compile options, which they link publicly).
set(MGM_PCH_HEADERS
    <algorithm> <array> <atomic> <chrono> <cstddef> <cstdint> <cstdio> <cstring> <filesystem> <fstream>
    <functional> <map> <memory> <mutex> <optional> <ostream> <set> <span> <sstream> <stdexcept> <string>
    <string_view> <system_error> <thread> <unordered_map> <utility> <vector>)

# mgm_layer(NAME [SOURCES file...] [DEPS layer...]): a static library for a layer with sources, an
# interface library for a header-only one.
function(mgm_layer name)
  cmake_parse_arguments(L "" "" "SOURCES;DEPS" ${ARGN})
  set(target mgm_${name})
  if(L_SOURCES)
    add_library(${target} STATIC ${L_SOURCES})
    set_target_properties(${target} PROPERTIES OUTPUT_NAME multigpumem_${name} POSITION_INDEPENDENT_CODE ON
                                               VERSION ${PROJECT_VERSION})
    target_compile_features(${target} PUBLIC cxx_std_20)
    foreach(dep IN LISTS L_DEPS)
      target_link_libraries(${target} PUBLIC mgm_${dep})
    endforeach()
    mgm_set_warnings(${target})
    # fmt for the layer's own number formatting: its headers only (see CMakeLists.txt), so the
    # exported targets carry no dependency on it; its implementation is compiled once, in the core
    # layer (src/fmt.cpp, src/detail/fmt.hpp).
    target_include_directories(${target} SYSTEM PRIVATE ${MGM_FMT_INCLUDE})
    if(name STREQUAL "core")
      target_precompile_headers(${target} PRIVATE ${MGM_PCH_HEADERS})
    else()
      target_precompile_headers(${target} REUSE_FROM mgm_core)
    endif()
  else()
    add_library(${target} INTERFACE)
    foreach(dep IN LISTS L_DEPS)
      target_link_libraries(${target} INTERFACE mgm_${dep})
    endforeach()
  endif()
  set_target_properties(${target} PROPERTIES EXPORT_NAME ${name})
  add_library(MultiGpuMem::${name} ALIAS ${target})
  set(MGM_LAYERS ${MGM_LAYERS} ${name} PARENT_SCOPE)
endfunction()

mgm_layer(core SOURCES src/bytes.cpp src/device.cpp src/error.cpp src/fmt.cpp src/log.cpp src/pool_observer.cpp src/unique_fd.cpp
                       src/platform/cuda_vmm_ops.cpp)
target_include_directories(mgm_core PUBLIC "$<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}/include>"
                                           "$<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>")
# The CUDA runtime: shared for the library's users (one runtime per process, as the CUDA
# libraries they also link expect), unless MGM_CUDART_STATIC says otherwise; a target that sets
# MGM_STATIC_CUDART (the mgm tool does) links it statically, so that it starts where only the
# driver is installed.
if(MGM_CUDART_STATIC)
  target_link_libraries(mgm_core PUBLIC CUDA::cudart_static)
else()
  target_link_libraries(mgm_core PUBLIC "$<IF:$<BOOL:$<TARGET_PROPERTY:MGM_STATIC_CUDART>>,CUDA::cudart_static,CUDA::cudart>")
endif()
target_link_libraries(mgm_core PUBLIC CCCL::CCCL Threads::Threads ${CMAKE_DL_LIBS})
if(MGM_NVTX)
  # NVTX3 is header-only (CUDA::nvtx3 adds its include folder); it loads a tool only when one is
  # attached (NVTX_INJECTION64_PATH), through dlopen, hence CMAKE_DL_LIBS above.
  target_link_libraries(mgm_core PUBLIC CUDA::nvtx3)
  target_compile_definitions(mgm_core PUBLIC MGM_WITH_NVTX=1)
endif()

mgm_layer(allocators DEPS core)
mgm_layer(topology SOURCES src/topology/topology.cpp src/topology/smi_parser.cpp src/topology/nccl_xml.cpp DEPS core)
# NCCL topology XML, with pugixml linked statically, as for telemetry below.
if(TARGET pugixml::static)
  target_link_libraries(mgm_topology PRIVATE pugixml::static)
else()
  target_link_libraries(mgm_topology PRIVATE pugixml::pugixml)
endif()
mgm_layer(sim SOURCES src/sim/device_list.cpp src/sim/machine.cpp src/sim/presets.cpp src/sim/graphs.cpp
                      src/sim/oracle.cpp src/sim/seams.cpp src/sim/seams_vmm.cpp src/sim/allocators.cpp DEPS core topology)
mgm_layer(pool SOURCES src/pool/pool_mutex.cpp src/pool/pool_options.cpp src/pool/pool_report.cpp src/pool/shared_block.cpp DEPS core)
target_include_directories(mgm_pool SYSTEM PRIVATE ${MGM_NLOHMANN_JSON_INCLUDE})  # snapshots as JSON
mgm_layer(adaptors SOURCES src/adaptors/adaptors.cpp DEPS core pool)
mgm_layer(discovery SOURCES src/topology/discovery.cpp DEPS core topology)
mgm_layer(
  telemetry
  SOURCES src/telemetry/leak_analysis.cpp
          src/telemetry/leak_shapes.cpp src/telemetry/leak_statistics.cpp src/telemetry/nvml.cpp src/telemetry/nvml_source.cpp
          src/telemetry/publisher.cpp src/telemetry/sampler.cpp src/telemetry/startup.cpp
          # the log readers: their text module, times, the format detection, one file per reader
          src/telemetry/text.cpp src/telemetry/log_time.cpp src/telemetry/log_detect.cpp src/telemetry/smi_csv.cpp
          src/telemetry/gpuz.cpp src/telemetry/jsonl_reader.cpp src/telemetry/smi_query_text.cpp
          src/telemetry/smi_query_xml.cpp
          # the sinks, one file each
          src/telemetry/csv_sink.cpp src/telemetry/process_csv_sink.cpp src/telemetry/jsonl_sink.cpp
          src/telemetry/prometheus_text.cpp
          # Prometheus as a source of a cluster's GPUs, over a plain-socket GET
          src/telemetry/prometheus_source.cpp src/telemetry/http_get.cpp
  DEPS core topology sim pool discovery)
# Telemetry's start-up (src/telemetry/startup.cpp) is linked into every program that links the
# telemetry layer, so that MGM_PUBLISH=1 works without a call.
target_link_options(mgm_telemetry INTERFACE "LINKER:--undefined=mgm_telemetry_startup")
# JSON lines, header-only: only its include folder (a PRIVATE link of a static library would land
# in the exported interface as LINK_ONLY, and every user of the package would need it).
target_include_directories(mgm_telemetry SYSTEM PRIVATE ${MGM_NLOHMANN_JSON_INCLUDE})
# nvidia-smi -q -x logs. Debian ships pugixml's static library too (nothing added to what mgm needs
# at run time); where a distribution has only the shared one, that one.
if(TARGET pugixml::static)
  target_link_libraries(mgm_telemetry PRIVATE pugixml::static)
else()
  target_link_libraries(mgm_telemetry PRIVATE pugixml::pugixml)
endif()
mgm_layer(
  trace
  SOURCES src/trace/cub_device_target.cpp src/trace/cub_target.cpp src/trace/growth_bound.cpp src/trace/replay.cpp src/trace/replay_device.cpp
          src/trace/replay_parallel.cpp src/trace/targets.cpp src/trace/trace_reader.cpp
  DEPS core allocators sim pool adaptors)
target_include_directories(mgm_trace SYSTEM PRIVATE ${MGM_NLOHMANN_JSON_INCLUDE})
# Each of these includes CUB with the CUDA runtime's calls redirected by macros: compiled on its own,
# never beside other files in a unity build.
set_source_files_properties(src/trace/cub_device_target.cpp src/trace/cub_target.cpp PROPERTIES SKIP_UNITY_BUILD_INCLUSION ON)
# The trace generator: its own target, which nothing of the library links (the benchmarks do).
mgm_layer(tracegen SOURCES src/trace/generator.cpp src/trace/generator_cnn.cpp src/trace/generator_bert.cpp src/trace/generator_gpt.cpp
                           src/trace/generator_tables.cpp DEPS core trace)
mgm_layer(partition SOURCES src/partition/partitioner.cpp src/partition/cluster.cpp src/partition/rebalancer.cpp
          DEPS core topology)
# The rebalancer's loop over telemetry sources (NVML, the simulator, our pools).
mgm_layer(rebalancing SOURCES src/partition/rebalance_driver.cpp DEPS core topology sim pool discovery telemetry partition)
mgm_layer(placement SOURCES src/placement/placement_policy.cpp DEPS core allocators topology sim pool adaptors discovery)
mgm_layer(interop DEPS core allocators pool)

# The one-stop target: every layer.
add_library(multigpumem INTERFACE)
foreach(layer IN LISTS MGM_LAYERS)
  target_link_libraries(multigpumem INTERFACE mgm_${layer})
endforeach()
set_target_properties(multigpumem PROPERTIES EXPORT_NAME multigpumem)
add_library(MultiGpuMem::multigpumem ALIAS multigpumem)
