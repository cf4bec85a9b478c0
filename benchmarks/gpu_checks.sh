#!/usr/bin/env bash
# The GPU checks of issue 33, as one script for a lent GPU machine (the device tool; never CI).
#
# 1. A ledger sweep on the GPU: `python -m calib ledger $LEDGER --device cuda --jobs $JOBS`,
#    the one-thread shards sharing the GPU, at the quick profile and in float32 as
#    ledger.run pins them. A sweep stopped by the time limit checkpoints its cells (SIGINT)
#    and records the session as stopped. (The regime sweep's protocol-A cells at 55,000
#    images were made by this script's first version, at 8ad4504, which ran the sweep's
#    arguments restricted to those nine cells; device_check by the same command as here.)
# 2. benchmarks/train_step.py on CIFAR-shaped ResNet-20 and ResNet-50, bf16, channels_last,
#    batch 128 and 512: the trainer against a minimal loop, BSCE-GRA's epoch against CE's,
#    the FLOP rate against the bf16 matrix-product peak measured in the same process, and
#    torch.compile where launch overhead dominates (ResNet-20, batch 128).
#
# Needs data/fashion-mnist/ (the four IDX files) and CALIB_COMMIT (the commit sent: the copy
# has no .git). Writes OUT (default gpu-out): gpu.txt, ledger.log, ledger.tar.gz (the sweep's
# records, checkpoints of unfinished cells included), one .txt per benchmark.
# Usage: CALIB_COMMIT=$(git rev-parse HEAD) OUT=dir LEDGER=name JOBS=9 bash benchmarks/gpu_checks.sh
set -u
OUT=${OUT:-gpu-out}
LEDGER=${LEDGER:-regime}
LEDGER_S=${LEDGER_S:-300}
PY=${PY:-python3}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 CALIB_PROGRESS=0
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv > "$OUT/gpu.txt" 2>&1
$PY -c "import torch, platform; print('torch', torch.__version__, 'python', platform.python_version())" >> "$OUT/gpu.txt"

start=$(date +%s)
timeout -s INT -k 60 "$LEDGER_S" $PY -m calib ledger "$LEDGER" --device "${DEVICE:-cuda}" --jobs "${JOBS:-9}" \
  > "$OUT/ledger.log" 2>&1
tar czf "$OUT/ledger.tar.gz" --exclude=logits.pt "results/$LEDGER"
echo "ledger step: $(( $(date +%s) - start )) s" >> "$OUT/ledger.log"
[ -n "${SKIP_BENCH:-}" ] && exit 0

bench() {  # name, seconds, train_step.py arguments
  local name=$1 limit=$2; shift 2
  timeout -k 10 "$limit" $PY benchmarks/train_step.py --data fake_cifar --amp bf16 --channels-last \
    --rounds 5 --repeat 3 "$@" > "$OUT/$name.txt" 2>/dev/null || echo "exit $? (limit ${limit} s)" >> "$OUT/$name.txt"
}
bsce=bsce_gra:gamma=4,norm=2
bench r20_b128 60 --model resnet20 --batch 128 --train-size 5120 --also-loss $bsce
bench r20_b512 60 --model resnet20 --batch 512 --train-size 20480
bench r50_b128 70 --model resnet50 --batch 128 --train-size 5120
bench r50_b512 90 --model resnet50 --batch 512 --train-size 10240 --also-loss $bsce
bench r20_b128_compile 120 --model resnet20 --batch 128 --train-size 5120 --compile
