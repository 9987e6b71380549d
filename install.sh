#!/usr/bin/env bash
# Install libi under a prefix: the programs in PREFIX/bin, the C libraries in PREFIX/lib
# (with libi.pc in PREFIX/lib/pkgconfig), their headers in PREFIX/include, and the man page
# in PREFIX/share/man/man1.
#
#   ./install.sh [--no-build] [--mpiexec] [PREFIX]        PREFIX: /usr/local by default
#
#   --no-build   install what `cargo build --release --workspace` left in target/release
#                (or $CARGO_TARGET_DIR/release) instead of building it first
#   --mpiexec    also make PREFIX/bin/mpiexec a link to libi-mpiexec (MPICH's singleton init
#                runs the first `mpiexec` on PATH)
#
# DESTDIR is put before PREFIX, as by `make install` (for packaging).
set -euo pipefail

usage() { sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'; }
build=1 link=0 prefix=
for a in "$@"; do
  case "$a" in
    --no-build) build=0 ;;
    --mpiexec) link=1 ;;
    -h | --help) usage; exit 0 ;;
    -*) echo "install.sh: unknown option '$a'" >&2; usage >&2; exit 2 ;;
    *)
      [ -z "$prefix" ] || { echo "install.sh: one PREFIX, got '$prefix' and '$a'" >&2; exit 2; }
      prefix=$a
      ;;
  esac
done
prefix=${prefix:-/usr/local}
case "$prefix" in /*) ;; *) prefix="$PWD/$prefix" ;; esac
cd "$(dirname "$0")"

target=${CARGO_TARGET_DIR:-target}
case "$target" in /*) ;; *) target="$PWD/$target" ;; esac
rel=$target/release
[ "$build" = 0 ] || cargo build --release --workspace

bins=(libi-mpiexec libi-nla libi-tree libi-sim libi-pmicheck)
libs=(libpmi.so libpmi2.so libpmgr_collective.so liblibi.so)
headers=(libpmi/include/pmi.h libpmi2/include/pmi2.h pmgr/include/pmgr_collective_client.h
  pmgr/include/pmgr_collective_common.h session/include/libi.h)
for f in "${bins[@]}" "${libs[@]}"; do
  [ -f "$rel/$f" ] || {
    echo "install.sh: $rel/$f is missing (build with: cargo build --release --workspace)" >&2
    exit 1
  }
done

dest=${DESTDIR:-}$prefix
install -d "$dest/bin" "$dest/lib/pkgconfig" "$dest/include" "$dest/share/man/man1"
for b in "${bins[@]}"; do install -m 0755 "$rel/$b" "$dest/bin/$b"; done
for l in "${libs[@]}"; do install -m 0755 "$rel/$l" "$dest/lib/$l"; done
for h in "${headers[@]}"; do install -m 0644 "$h" "$dest/include/${h##*/}"; done
install -m 0644 docs/libi-mpiexec.1 "$dest/share/man/man1/libi-mpiexec.1"
# libi.pc as session/capi's build script writes it next to liblibi.so, with the installed
# paths.
version=$("$rel/libi-mpiexec" --version | awk '{print $2}')
cat >"$dest/lib/pkgconfig/libi.pc" <<EOF
libdir=$prefix/lib
includedir=$prefix/include

Name: libi
Description: The LIBI session API: launch and bootstrap tool daemons over the libi agent tree
Version: $version
Libs: -L\${libdir} -Wl,-rpath,\${libdir} -llibi
Cflags: -I\${includedir}
EOF
[ "$link" = 0 ] || ln -sfn libi-mpiexec "$dest/bin/mpiexec"
echo "install.sh: installed libi $version under $dest" \
  "(${#bins[@]} programs$([ "$link" = 0 ] || echo ' and mpiexec'), ${#libs[@]} libraries," \
  "${#headers[@]} headers, libi.pc, libi-mpiexec.1)"
