# Options and data shared by bench/epochs.sh and bench/tuned.sh (sourced). The script sets its
# defaults (build, data, limit, epochs, reps, out) and `usage` (the sed range of its header),
# then calls `bench_options "$@"` and `bench_data`.

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
  if [ ! -f "$data" ]; then
    data=$out/sst_like.txt
    "$build/pejit" gen sst --trees 8544 --seed 1 -o "$data" >/dev/null
  fi
}
