# Sourced by the run_fake*.sh scripts: builds one GPU check program against
# the host emulation of the CUDA API (fake_cuda.c and the area fakes) with
# AddressSanitizer. Objects are kept in OUT and rebuilt when their source is
# newer, all of them when a header, or a C file under tests/cuda (the check
# programs include parts of themselves: vibevoice_gpu_engine.c), is newer
# than the program.
#   fake_begin OUT       the list starts with base, tensor and the x86 twins
#   fake_cuda FILE...    more sources, compiled with -DCHOIR_HAVE_CUDA=1
#   fake_build NAME      compiles the list and links OUT/NAME (with the
#                        system libraries in FAKE_LIBS, when set); the backend's
#                        operation files go into an archive, so only those the
#                        program reaches are linked (other areas' operations
#                        call kernels the emulation may lack)
fake_begin() {
    OUT=$1
    JOBS=${JOBS:-$(nproc)}
    CC=${CC:-cc}
    FLAGS="-std=c11 -O1 -g -fsanitize=address -fno-omit-frame-pointer -D_GNU_SOURCE -DCHOIR_X86=1
       -Iinclude -Isrc -Itests/cuda/stub -Wall -Wextra -Wno-unused-parameter -Wno-format-truncation"
    mkdir -p "$OUT"
    list=$OUT/sources.txt
    : >"$list"
    local f
    for f in src/base/*.c src/tensor/*.c src/tensor/cpu/*.c tests/cuda/stub/cblas_loops.c \
             tests/cuda/stub/quant_layout.c; do
        [ "$f" = src/tensor/quantize.c ] || echo "$f" >>"$list"
    done
    for f in src/tensor/cpu/x86/*.c; do
        case "$f" in
        */avx512_*) echo "$f -mavx2 -mfma -mf16c -mavx512f -mavx512bw -mavx512vl" >>"$list" ;;
        *) echo "$f -mavx2 -mfma -mf16c" >>"$list" ;;
        esac
    done
}

fake_cuda() {
    local f
    for f in "$@"; do echo "$f -DCHOIR_HAVE_CUDA=1" >>"$list"; done
}

fake_build() {
    local prog=$OUT/$1
    export CC FLAGS OUT
    if [ -f "$prog" ] && [ -n "$(find include src tests/cuda \( -name '*.h' -o -path 'tests/cuda/*.c' \) -newer "$prog")" ]; then
        rm -f "$OUT"/*.o
    fi
    # shellcheck disable=SC2016
    xargs -P "$JOBS" -L 1 bash -c '
        src=$0; obj="$OUT/$(echo "$src" | tr / _).o"
        if [ ! -f "$obj" ] || [ "$src" -nt "$obj" ]; then $CC $FLAGS "$@" -c "$src" -o "$obj"; fi
    ' <"$list"
    local objs
    objs=$(awk -v o="$OUT" '$1 !~ /^src\/tensor\/backend\// { gsub("/", "_", $1); print o "/" $1 ".o" }' "$list")
    rm -f "$OUT/libbackend.a"
    if grep -q '^src/tensor/backend/' "$list"; then
        ar rcs "$OUT/libbackend.a" $(awk -v o="$OUT" '$1 ~ /^src\/tensor\/backend\// { gsub("/", "_", $1); print o "/" $1 ".o" }' "$list")
        objs="$objs $OUT/libbackend.a"
    fi
    # shellcheck disable=SC2086
    "$CC" -fsanitize=address $objs -o "$prog" ${FAKE_LIBS:-} -lm -lpthread -ldl
}
