# Options and data shared by the bench scripts (sourced). epochs.sh and tuned.sh set their
# defaults (build, data, limit, epochs, reps, out) and `usage` (the sed range of its header),
# then call `bench_options "$@"` and `bench_data`; threads.sh, dp.sh and paired.sh parse their
# own options and use `bench_pejit` and `bench_gen_data`; zoo.sh gives bench_pejit its -b BUILD.

# -b BUILD -d FILE -l LIMIT -e EPOCHS -n REPS -o DIR; anything else prints the usage.
bench_options() {
  local o OPTIND=1
  while getopts "b:d:l:e:n:o:h" o; do
    case $o in
    b) build=$OPTARG ;;
    d) data=$OPTARG ;;
    l) limit=$OPTARG ;;
    e) epochs=$OPTARG ;;
    n) reps=$OPTARG ;;
    o) out=$OPTARG; mkdir -p "$out" ;;
    *) sed -n "$usage" "$0"; exit 2 ;;
    esac
  done
}

# Without the data file, 8,544 generated SST-like trees in the output folder instead.
bench_data() {
  bench_gen_data "$build/pejit" "$out"
}

# bench_gen_data PEJIT DIR: when $data is not a file (../shared is optional), $data becomes
# 8,544 SST-like trees that PEJIT generates into DIR, with a note on stderr.
bench_gen_data() {
  if [ ! -f "$data" ]; then
    echo "$(basename "$0"): $data not found; using 8,544 generated SST-like trees" >&2
    data=$2/sst_like.txt
    "$1" gen sst --trees 8544 --seed 1 -o "$data" >/dev/null
  fi
}

# bench_pejit [BUILD]: when $pejit is empty, BUILD/pejit, or without BUILD the first of
# build-bench/pejit and build/pejit that exists; stops the script when there is none.
# shellcheck disable=SC2120 # BUILD is optional
bench_pejit() {
  if [ -z "$pejit" ] && [ -n "${1:-}" ]; then
    pejit=$1/pejit
  elif [ -z "$pejit" ]; then
    for p in build-bench/pejit build/pejit; do
      if [ -x "$p" ]; then pejit=$p; break; fi
    done
  fi
  if [ -z "$pejit" ] || [ ! -x "$pejit" ]; then
    if [ -n "${1:-}" ]; then
      echo "$(basename "$0"): no pejit binary in $1 (build it there, or pass another build)" >&2
    else
      echo "$(basename "$0"): no pejit binary (build it, or pass -p PATH)" >&2
    fi
    exit 2
  fi
}
