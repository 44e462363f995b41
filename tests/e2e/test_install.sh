#!/usr/bin/env bash
# The installed package works for outside programs: headers, libhvd.so with its SONAME, the
# static library, hvd.pc for pkg-config, hvdConfig.cmake for find_package(hvd), and the
# horovod Python package.
source "$(dirname "$0")/lib.sh"

prefix="$TMP/prefix"
cmake --install "$HVD_BUILD_DIR" --prefix "$prefix" >/dev/null
libdir=$(ls -d "$prefix"/lib*/ | head -1)
[[ -f "$prefix/include/hvd/hvd.h" && -f "$prefix/include/hvd/types.h" ]] || fail "headers not installed"
[[ -x "$prefix/bin/horovodrun" ]] || fail "horovodrun not installed"
[[ -x "$prefix/bin/horovodrun-slurm-hosts" ]] || fail "horovodrun-slurm-hosts not installed (executable)"
[[ -f "$libdir/libhvd.a" ]] || fail "static library not installed"
soname=$(objdump -p "$libdir/libhvd.so" | awk '/SONAME/ {print $2}')
expect_eq "SONAME" "libhvd.so.0" "$soname"

# a sanitized build's library needs its runtime in the consumer too
extra=""
if nm -D "$libdir/libhvd.so" | grep __asan_init >/dev/null; then extra="-fsanitize=address,undefined"; fi

export PKG_CONFIG_PATH="$libdir/pkgconfig"
cc -Wall -Werror $extra -o "$TMP/hello_pc" "$HVD_SOURCE_DIR/examples/hello.c" $(pkg-config --cflags --libs hvd)
out=$(LD_LIBRARY_PATH="$libdir" "$TMP/hello_pc")
expect_contains "pkg-config consumer" "$out" "hello from rank 0 of 1"

mkdir -p "$TMP/consumer"
cp "$HVD_SOURCE_DIR/examples/hello.c" "$TMP/consumer/"
cat >"$TMP/consumer/CMakeLists.txt" <<CMAKE
cmake_minimum_required(VERSION 3.18)
project(consumer C)
find_package(hvd 0.1 REQUIRED)
add_executable(hello hello.c)
target_link_libraries(hello PRIVATE hvd::hvd)
target_link_options(hello PRIVATE $extra)
CMAKE
cmake -S "$TMP/consumer" -B "$TMP/consumer/build" -DCMAKE_PREFIX_PATH="$prefix" >/dev/null
cmake --build "$TMP/consumer/build" >/dev/null
out=$(LD_LIBRARY_PATH="$libdir" "$TMP/consumer/build/hello")
expect_contains "find_package consumer" "$out" "hello from rank 0 of 1"

# the horovod package lands where Debian's python3 looks for this prefix and finds the
# installed libhvd through its RPATH (no LD_LIBRARY_PATH)
pydir=$(ls -d "$prefix"/lib/python3*/dist-packages | head -1)
[[ -f "$pydir/horovod/torch/__init__.py" ]] || fail "the horovod package was not installed"
ext=$(ls "$pydir"/horovod/_hvd*.so)
resolved=$(ldd "$ext" | awk '/libhvd.so.0/ {print $3}')
[[ -n $resolved && $(realpath "$resolved") == $(realpath "$libdir/libhvd.so.0") ]] ||
  fail "the extension does not use the installed libhvd: $(ldd "$ext")"
preload=()
if [[ -n $extra ]]; then # the interpreter is not instrumented: load the sanitizer first
  preload=(env "LD_PRELOAD=$(cc -print-file-name=libasan.so)" "ASAN_OPTIONS=detect_leaks=0")
fi
out=$(cd "$TMP" && PYTHONPATH="$pydir" "${preload[@]}" /usr/bin/python3 -c '
import horovod.torch as hvd, torch
hvd.init()
print("python rank", hvd.rank(), "of", hvd.size(), hvd.allreduce(torch.ones(2)).tolist())')
expect_contains "installed horovod package" "$out" "python rank 0 of 1 [1.0, 1.0]"

# the installed launcher runs the installed-library program
out=$(LD_LIBRARY_PATH="$libdir" "$prefix/bin/horovodrun" -np 2 "$TMP/hello_pc")
expect_contains "installed horovodrun" "$out" "[1]<stdout>:hello from rank 1 of 2"
pass
