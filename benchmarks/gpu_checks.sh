#!/usr/bin/env bash
# The GPU checks of issue 33, as one script for a lent GPU machine (the device tool; never CI).
#
# 1. The regime ledger's nine mean-protocol (A) cells at all 55,000 training images, nine
#    one-thread processes sharing the GPU, float32 (NVIDIA_TF32_OVERRIDE=0: no TF32 in cuDNN's
#    convolutions) at the quick profile (CUDA would make colab the default). They run as a sweep of exactly those cells, with the regime sweep's own
#    arguments, into a scratch folder; the cells are then copied into results/regime and the
#    session is recorded in its provenance (ledger.record, device named). A run stopped by the
#    time limit checkpoints its cells (SIGINT) and is recorded as stopped.
# 2. benchmarks/train_step.py on CIFAR-shaped ResNet-20 and ResNet-50, bf16, channels_last,
#    batch 128 and 512: the trainer against a minimal loop, BSCE-GRA's epoch against CE's,
#    the FLOP rate against the bf16 matrix-product peak measured in the same process, and
#    torch.compile where launch overhead dominates (ResNet-20, batch 128).
#
# Needs data/fashion-mnist/ (the four IDX files) and CALIB_COMMIT (the commit sent: the copy
# has no .git). Writes OUT (default gpu-out): gpu.txt, ledger.log, regime.tar.gz (the
# ledger's records, checkpoints of unfinished cells included), one .txt per benchmark.
# Usage: CALIB_COMMIT=$(git rev-parse HEAD) OUT=dir bash benchmarks/gpu_checks.sh
set -u
OUT=${OUT:-gpu-out}
LEDGER_S=${LEDGER_S:-300}
PY=${PY:-python3}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 CALIB_PROGRESS=0
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv > "$OUT/gpu.txt" 2>&1
$PY -c "import torch, platform; print('torch', torch.__version__, 'python', platform.python_version())" >> "$OUT/gpu.txt"

fm=(--data fashion_mnist --model cnn5 --train-size 10000 --val-size 5000 --epochs 40 --milestones 20,30
    --batch-size 128 --momentum 0.9 --weight-decay 5e-4 --track test --no-progress --seeds 0,1,2)
cells=(--loss "ce@lr=0.05,train_size=55000" --loss "focal:gamma=3@lr=0.05,train_size=55000"
       --loss "bsce_gra:gamma=4,norm=2@lr=0.05,train_size=55000")
scratch=${SCRATCH:-/tmp/regime-a55}
start=$(date +%s)
for i in 1 2 3 4 5 6 7 8 9; do
  CALIB_PROFILE=quick OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 NVIDIA_TF32_OVERRIDE=0 timeout -s INT -k 60 "$LEDGER_S" \
    $PY -m calib sweep "${fm[@]}" "${cells[@]}" --out "$scratch" --shard "$i/9" --device "${DEVICE:-cuda}" \
    > "$OUT/shard$i.log" 2>&1 &
done
wait
cat "$OUT"/shard*.log > "$OUT/ledger.log"; rm -f "$OUT"/shard*.log
mkdir -p results/regime/runs && cp -a "$scratch/runs/." results/regime/runs/
CALIB_PROFILE=quick $PY - "$start" "$scratch" >> "$OUT/ledger.log" 2>&1 <<'PYEOF'
import os, sys
from pathlib import Path
from calib.experiments import ledger
done = len(list(Path(sys.argv[2]).glob("runs/*/metrics.json")))
prov = ledger.record("regime", jobs=9, commit=os.environ.get("CALIB_COMMIT"), start=float(sys.argv[1]),
                     stopped=done < 9, device=os.environ.get("DEVICE", "cuda"))
print(f"regime: {prov['cells_finished']}/{prov['cells_planned']} cells")
PYEOF
tar czf "$OUT/regime.tar.gz" --exclude=logits.pt results/regime
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
