#!/usr/bin/env bash
# The main job's training step, ours against OpenNMT-tf 2.32's, in float32 on the same data,
# vocabulary, model, batches and schedule, taking turns (README.md here). From the project root:
#   benchmarks/opennmt_tf/side_by_side.sh [STEPS=1000] [ROUNDS=2]
# OpenNMT-tf's environment: $ONMT (default runs/opennmt_tf/venv); ours: $PYTHON (default the
# project's .venv/bin/python where setup.sh made it, else python).
set -euo pipefail
STEPS=${1:-1000}
ROUNDS=${2:-2}
ONMT=${ONMT:-runs/opennmt_tf/venv}
[[ -x .venv/bin/python ]] && OURS=.venv/bin/python || OURS=python
PYTHON=${PYTHON:-$OURS}
WORK=runs/opennmt_tf
HERE=benchmarks/opennmt_tf
if [[ ! -x $ONMT/bin/onmt-main ]]; then
  echo "side_by_side.sh: no $ONMT/bin/onmt-main: install OpenNMT-tf first (README.md here)" >&2
  exit 2
fi
if ! "$PYTHON" -c "import keras_transformer, absl" 2>/dev/null; then
  echo "side_by_side.sh: $PYTHON cannot import keras_transformer: run from the project root after bash trainers/setup.sh, or set PYTHON" >&2
  exit 2
fi
[[ -s $WORK/data/vocab.txt ]] || "$PYTHON" -m benchmarks.opennmt_tf.export_data --output_dir=$WORK/data
printf 'train:\n  max_step: %d\n' "$STEPS" > $WORK/max_step.yml
failed() {
  echo "side_by_side.sh: the $1 training of round $2 failed: its log is $WORK/$1-$2.log" >&2
  rm -rf $WORK/ours $WORK/run
  exit 1
}
ours() {
  rm -rf $WORK/ours
  "$PYTHON" -m trainers.wmt --dataset=libreoffice_help_en_de --vocab_size=2000 --max_length=64 \
    --token_budget=2048 --preset=mini --dropout_rate=0.1 --norm_first --warmup_steps=200 \
    --mixed_precision=float32 --train_steps="$STEPS" --log_every_steps=50 --dev_every_steps=0 \
    --dev_bleu_sentences=0 --checkpoint_every_minutes=0 --model_dir=$WORK/ours \
    > $WORK/ours-$1.log 2>&1 || failed ours $1
  "$PYTHON" -m benchmarks.opennmt_tf.throughput --log=$WORK/ours-$1.log --last="$STEPS"
}
opennmt() {
  rm -rf $WORK/run
  "$ONMT/bin/onmt-main" --model $HERE/model.py --config $HERE/config.yml $WORK/max_step.yml \
    --seed 1 train > $WORK/onmt-$1.log 2>&1 || failed onmt $1
  "$PYTHON" -m benchmarks.opennmt_tf.throughput --log=$WORK/onmt-$1.log --last="$STEPS"
}
# Odd rounds ours first, even rounds OpenNMT-tf first: a machine whose speed drifts during the
# run favours neither.
for round in $(seq "$ROUNDS"); do
  echo "round $round, $(date -u +%H:%M:%S) UTC, load $(cut -d' ' -f1-3 /proc/loadavg)"
  if (( round % 2 )); then ours $round; opennmt $round; else opennmt $round; ours $round; fi
done
rm -rf $WORK/ours $WORK/run
