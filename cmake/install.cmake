# Install rules and the Debian packages (included by CMakeLists.txt once the targets exist).
#
#   cmake --install BUILD [--prefix P]     (DESTDIR=... honoured; P defaults to /usr/local)
#   cpack -G DEB --config BUILD/CPackConfig.cmake    (in BUILD: shardcheck_VERSION_ARCH.deb,
#                                        and shardcheck-cuda_VERSION_ARCH.deb when CUDA is built)
#
# Layout under the prefix: bin/shardcheck; share/shardcheck/scenarios/ (the shipped scenarios,
# with hardware/ and models/ as in the checkout: the data root kernels/paths.h finds relative to
# the binary); lib/shardcheck/libshardcheck_cuda.so (the cuda component, only when the backend is
# built); share/man/man1/shardcheck.1.gz (made by the binary from its --help texts: cli/main.c);
# share/bash-completion/completions/shardcheck; share/doc/shardcheck/ (README.md and docs/).
# Which packages and what they depend on: below. The version is cmake/version.cmake's, taken
# when cpack runs, so the package and `shardcheck --version` name the same revision.

set(SC_DATADIR ${CMAKE_INSTALL_DATADIR}/shardcheck)
set(SC_PKGLIBDIR ${CMAKE_INSTALL_LIBDIR}/shardcheck)

# --- the manual page, from the binary just built
set(SC_MAN ${CMAKE_BINARY_DIR}/shardcheck.1.gz)
add_custom_command(
  OUTPUT ${SC_MAN}
  COMMAND ${CMAKE_COMMAND} -DBIN=$<TARGET_FILE:shardcheck> -DOUT=${SC_MAN}
          -P ${CMAKE_SOURCE_DIR}/cmake/man.cmake
  DEPENDS shardcheck ${CMAKE_SOURCE_DIR}/cmake/man.cmake
  COMMENT "Writing shardcheck.1 from the --help texts")
add_custom_target(man ALL DEPENDS ${SC_MAN})

# --- what is installed (component main: the shardcheck package)
install(TARGETS shardcheck RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR} COMPONENT main)
install(DIRECTORY ${CMAKE_SOURCE_DIR}/scenarios/ DESTINATION ${SC_DATADIR}/scenarios
        COMPONENT main FILES_MATCHING PATTERN "*.yaml")
install(FILES ${SC_MAN} DESTINATION ${CMAKE_INSTALL_MANDIR}/man1 COMPONENT main)
install(FILES ${CMAKE_SOURCE_DIR}/cli/shardcheck.bash
        DESTINATION ${CMAKE_INSTALL_DATADIR}/bash-completion/completions RENAME shardcheck
        COMPONENT main)
install(FILES ${CMAKE_SOURCE_DIR}/README.md DESTINATION ${CMAKE_INSTALL_DOCDIR} COMPONENT main)
install(DIRECTORY ${CMAKE_SOURCE_DIR}/docs/ DESTINATION ${CMAKE_INSTALL_DOCDIR}/docs
        COMPONENT main FILES_MATCHING PATTERN "*.md")
set(SC_COMPONENTS main)
if(SHARDCHECK_HAVE_CUDA)
  install(TARGETS shardcheck_cuda LIBRARY DESTINATION ${SC_PKGLIBDIR} COMPONENT cuda)
  list(APPEND SC_COMPONENTS cuda)
endif()

# --- the Debian packages
set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME shardcheck)
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION}) # replaced at cpack time (CPackProjectConfig)
set(CPACK_PACKAGE_CONTACT "shardcheck maintainers" CACHE STRING "the Debian packages' Maintainer")
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_STRIP_FILES ON)
set(CPACK_DEB_COMPONENT_INSTALL ON)
set(CPACK_COMPONENTS_ALL ${SC_COMPONENTS})
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SECTION devel)
# Depends from the libraries the files link (dpkg-shlibdeps: libopenblas0, libfyaml0, ...).
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(CPACK_DEBIAN_MAIN_PACKAGE_NAME shardcheck)
set(CPACK_DEBIAN_MAIN_PACKAGE_RECOMMENDS "gnuplot-nox | gnuplot")
set(CPACK_DEBIAN_MAIN_PACKAGE_SUGGESTS "faketime, sqlite3")
# Each description's first line is its synopsis (no CPACK_PACKAGE_DESCRIPTION_SUMMARY: CPack
# would put it before every component's own).
string(CONCAT CPACK_DEBIAN_MAIN_DESCRIPTION
    "test harness and fault-injection simulator for sharded LLM serving\n"
    "shardcheck runs a tensor/pipeline/data-parallel Llama engine (CPU, or simulated GPUs in\n"
    "virtual time) under scripted scenarios and faults, records every request in SQLite,\n"
    "plots scaling and gives an SLO verdict a CI job can gate on.")
if(SHARDCHECK_HAVE_CUDA)
  set(CPACK_DEBIAN_CUDA_PACKAGE_NAME shardcheck-cuda)
  set(CPACK_COMPONENT_CUDA_DEPENDS main) # Depends: shardcheck (= the same version)
  set(CPACK_DEBIAN_ENABLE_COMPONENT_DEPENDS ON)
  get_filename_component(sc_nccl ${NCCL_LIBRARY} REALPATH)
  get_filename_component(sc_nccl ${sc_nccl} NAME)
  string(REGEX REPLACE "^(libnccl\\.so\\.[0-9]+).*" "\\1" sc_nccl ${sc_nccl})
  set(sc_major ${CUDAToolkit_VERSION_MAJOR})
  string(CONCAT CPACK_DEBIAN_CUDA_DESCRIPTION
      "CUDA backend of shardcheck (libshardcheck_cuda.so)\n"
      "Runs shardcheck's engine on NVIDIA GPUs (hardware: {backend: cuda}); loaded by shardcheck\n"
      "when a run first opens a cuda device. Needs the CUDA runtime, cuBLAS and NCCL it was\n"
      "built against (libcudart.so.${sc_major}, libcublas.so.${sc_major}, ${sc_nccl}) on the\n"
      "dynamic linker's path.")
  # Depends from the CUDA libraries only where dpkg knows who installed them (NVIDIA's Debian
  # packages); a toolkit installed otherwise (NVIDIA's runfile, a container image) has no
  # package to name, and the description says which libraries it needs.
  get_target_property(sc_cublas CUDA::cublas LOCATION)
  get_filename_component(sc_cublas ${sc_cublas} REALPATH)
  execute_process(COMMAND dpkg -S ${sc_cublas} RESULT_VARIABLE sc_dpkg_rc OUTPUT_QUIET ERROR_QUIET)
  if(NOT sc_dpkg_rc EQUAL 0)
    set(CPACK_DEBIAN_CUDA_PACKAGE_SHLIBDEPS OFF)
    message(STATUS "shardcheck: the CUDA libraries belong to no Debian package: "
                   "shardcheck-cuda declares no Depends on them")
  endif()
endif()
configure_file(${CMAKE_SOURCE_DIR}/cmake/CPackProjectConfig.cmake.in
               ${CMAKE_BINARY_DIR}/CPackProjectConfig.cmake @ONLY)
set(CPACK_PROJECT_CONFIG_FILE ${CMAKE_BINARY_DIR}/CPackProjectConfig.cmake)
include(CPack)
