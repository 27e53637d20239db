#!/bin/sh
# A smoke run of bench/zoo.sh's roofline section: pejit_profile_bench --model on every zoo model,
# each on the data it trains on (generated here: SST-like trees, n-ary trees for the child-sum
# TreeLSTM, ListOps, plain sentences for the LSTM language model), one short epoch, with
# --stages; each must end with its roofline line and a positive FLOP count per tree (per
# sentence for the list model), and print its planning stages, every one timed. Timing does
# not matter here.
#   profile_check.sh BUILD_DIR WORKDIR
set -eu
src=$(cd "$(dirname "$0")/../.." && pwd)
build=$1 work=$2
rm -rf "$work"
mkdir -p "$work"
"$build/pejit" gen sst --trees 60 --seed 1 -o "$work/sst.txt" >/dev/null
"$build/pejit" gen sst --trees 60 --arity 4 --seed 1 -o "$work/nary.txt" >/dev/null
"$build/pejit" gen listops --trees 60 --seed 1 -o "$work/listops.txt" >/dev/null
"$build/pejit" gen sst --sentences --trees 60 --seed 1 -o "$work/sentences.txt" >/dev/null
fail=0
for spec in treelstm/treelstm:sst:tree treegru/treegru:sst:tree recnn/recnn:sst:tree \
  nary_treelstm/nary_treelstm:sst:tree childsum/childsum:nary:tree listops/listops:listops:tree \
  rnn/rnn:sentences:sentence tagger/tagger:sst:tree; do
  model=${spec%%:*} rest=${spec#*:}
  data=${rest%%:*} unit=${rest#*:}
  name=$(basename "$model")
  if ! "$build/pejit_profile_bench" "$work/$data.txt" 50 1 --model "$src/examples/$model.pe" \
    --stages >"$work/$name.out" 2>&1; then
    cat "$work/$name.out"
    echo "FAIL: $name: pejit_profile_bench exited with an error"
    fail=1
    continue
  fi
  line=$(tail -n 1 "$work/$name.out")
  echo "$line"
  mflop=$(echo "$line" | sed -n "s/^roofline $name\.pe: \([0-9.]*\) MFLOP per $unit, .* MFLOP per step; .*/\1/p")
  if [ -z "$mflop" ] || ! awk -v x="$mflop" 'BEGIN { exit !(x > 0) }'; then
    echo "FAIL: $name: no roofline line with a positive FLOP count per $unit"
    fail=1
  fi
  # Every stage of planning timed (merging too: the bench merges as the engine does).
  grep '^planning stages, us per batch: ' "$work/$name.out" || true
  times=$(sed -n 's/^planning stages, us per batch: walk \([0-9.]*\), payload pattern \([0-9.]*\), scan \([0-9.]*\), evaluation \([0-9.]*\), merge \([0-9.]*\), plan \([0-9.]*\), layout \([0-9.]*\) (\([0-9]*\) batches)$/\1 \2 \3 \4 \5 \6 \7 \8/p' "$work/$name.out")
  if ! echo "$times" | awk '{ ok = NF == 8 && $8 == 2; for (i = 1; i <= 7; ++i) ok = ok && $i > 0 }
      END { exit !(NR == 1 && ok) }'; then
    echo "FAIL: $name: no planning stages line with every stage timed over the 2 batches"
    fail=1
  fi
done
[ "$fail" = 0 ] || exit 1
echo "PASS: a roofline line with a positive FLOP count and every planning stage timed for every zoo model"
