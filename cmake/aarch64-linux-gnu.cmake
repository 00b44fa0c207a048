# CMake toolchain for an aarch64 (arm64) build with Debian 12's cross toolchain
# (crossbuild-essential-arm64: aarch64-linux-gnu-g++) against Debian's arm64 packages:
#
#   scripts/setup.sh arm64 && scripts/arm64_overlay.sh
#   cmake -S . -B build-arm64 -DCMAKE_TOOLCHAIN_FILE=cmake/aarch64-linux-gnu.cmake \
#         -DCMAKE_BUILD_TYPE=Release -DBERTLAB_NATIVE=OFF
#
# scripts/check_arm64.sh does all of it and runs the tests under qemu-user-static.
#
# Where the arm64 libraries come from:
# - Multiarch installs (setup.sh arm64): libtbb-dev:arm64, libfmt-dev:arm64, ... live in
#   /usr/lib/aarch64-linux-gnu with their CMake configs in /usr/lib/aarch64-linux-gnu/cmake.
#   CMake searches <prefix>/lib/<CMAKE_LIBRARY_ARCHITECTURE> and never the amd64 directory, so
#   no sysroot is needed; headers in /usr/include are shared by both architectures, and the
#   cross compiler adds /usr/include/aarch64-linux-gnu for the arch-specific ones.
# - The overlay (scripts/arm64_overlay.sh, default build-arm64-overlay/ in the checkout):
#   oneDNN's -dev package and Open MPI, which dpkg cannot install next to the amd64 ones
#   (the script says why), unpacked into a directory. It is searched first, and it is the
#   emulator's library prefix: qemu-aarch64 -L DIR looks an absolute path up in DIR first and
#   then on the host, so at run time the loader finds libmpi.so.40 and libdnnl.so.2 in the
#   overlay and everything else (libc6:arm64, ...) in the host's multiarch directories.
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_CXX_COMPILER aarch64-linux-gnu-g++)
set(CMAKE_LIBRARY_ARCHITECTURE aarch64-linux-gnu)

if(NOT BERTLAB_ARM64_OVERLAY)
  if(DEFINED ENV{BERTLAB_ARM64_OVERLAY})
    set(BERTLAB_ARM64_OVERLAY "$ENV{BERTLAB_ARM64_OVERLAY}")
  else()
    set(BERTLAB_ARM64_OVERLAY "${CMAKE_CURRENT_LIST_DIR}/../build-arm64-overlay")
  endif()
endif()
get_filename_component(BERTLAB_ARM64_OVERLAY "${BERTLAB_ARM64_OVERLAY}" ABSOLUTE)
set(BERTLAB_ARM64_OVERLAY "${BERTLAB_ARM64_OVERLAY}" CACHE PATH "arm64 packages unpacked by scripts/arm64_overlay.sh")
set(_bertlab_overlay_lib "${BERTLAB_ARM64_OVERLAY}/usr/lib/aarch64-linux-gnu")
if(NOT EXISTS "${_bertlab_overlay_lib}/openmpi/include/mpi.h")
  message(FATAL_ERROR "aarch64 toolchain: no arm64 Open MPI in ${BERTLAB_ARM64_OVERLAY}: run scripts/arm64_overlay.sh")
endif()
list(PREPEND CMAKE_PREFIX_PATH "${BERTLAB_ARM64_OVERLAY}/usr")

# Runs the arm64 programs: try_run, ctest, and catch_discover_tests (which lists the tests by
# running the test binary through this emulator at build time).
# Cached (and refreshed on every configure) so that scripts/check_arm64.sh can read it too.
set(CMAKE_CROSSCOMPILING_EMULATOR /usr/bin/qemu-aarch64-static -L "${BERTLAB_ARM64_OVERLAY}"
    CACHE STRING "Runs an arm64 program on this machine" FORCE)

# pkg-config (libutf8proc): the arm64 .pc files, not the host's.
set(ENV{PKG_CONFIG_LIBDIR} "/usr/lib/aarch64-linux-gnu/pkgconfig:/usr/share/pkgconfig")
set(ENV{PKG_CONFIG_PATH} "")

# MPI: FindMPI asks the compiler wrapper (mpicxx) first, and the one on PATH is the host's
# amd64 wrapper, which would hand over amd64 paths. Skip it and name the arm64 pieces instead.
set(MPI_SKIP_COMPILER_WRAPPER TRUE)
set(MPI_CXX_HEADER_DIR "${_bertlab_overlay_lib}/openmpi/include" CACHE PATH "")
set(MPI_CXX_LIB_NAMES "mpi_cxx;mpi" CACHE STRING "")
set(MPI_mpi_cxx_LIBRARY "${_bertlab_overlay_lib}/openmpi/lib/libmpi_cxx.so" CACHE FILEPATH "")
set(MPI_mpi_LIBRARY "${_bertlab_overlay_lib}/openmpi/lib/libmpi.so" CACHE FILEPATH "")
# libmpi's own dependencies (libopen-pal, libpmix, ...) are in the overlay too: the linker
# must find them to check the link, and they are not on its default search path.
set(CMAKE_EXE_LINKER_FLAGS_INIT "-Wl,-rpath-link,${_bertlab_overlay_lib}")
set(CMAKE_SHARED_LINKER_FLAGS_INIT "-Wl,-rpath-link,${_bertlab_overlay_lib}")

# -march=native would tune for the build machine, an x86-64 one: a cross build is portable
# ARMv8-A (the option's default when the toolchain sets none).
set(BERTLAB_NATIVE OFF CACHE BOOL "Tune for the build machine (-march=native): never in a cross build")
