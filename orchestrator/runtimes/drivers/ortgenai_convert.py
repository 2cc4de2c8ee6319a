"""Convert the source HF folder to an ONNX Runtime GenAI model folder, atomically.

Standalone (run by the runtime's environment's Python): argv = HF_DIR OUT_DIR PRECISION.
The model builder insists on a tokenizer; orch's models are fed token ids, never text, so a
word-level tokenizer over the model's synthetic vocabulary is written next to links to the
weights in a staging folder. The builder writes into OUT_DIR.tmp-<pid>, which is renamed to
OUT_DIR only when it succeeded: a failed conversion never leaves a half-written model behind.
"""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any


def vocab(n: int) -> list[str]:
    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)]
    return tokens + [f"\u2581t{i}" for i in range(n - len(tokens))]


def weight_bytes(folder: str) -> dict[str, int]:
    """Initializer bytes a decode step reads: all but the gathered tables (one row of each)."""
    import onnx  # type: ignore[import-not-found]

    model = onnx.load(os.path.join(folder, "model.onnx"), load_external_data=False)
    gathered = {n.input[0] for n in model.graph.node if n.op_type == "Gather"}
    total = table = 0
    for t in model.graph.initializer:
        size = next((int(e.value) for e in t.external_data if e.key == "length"), len(t.raw_data))
        if t.name in gathered and t.dims:
            table += size
            total += size // int(t.dims[0])
        else:
            total += size
    return {"bytes_per_decode_token": total, "gathered_table_bytes": table}


def main() -> int:
    hf, out, precision = sys.argv[1], sys.argv[2], sys.argv[3]
    tmp = f"{out}.tmp-{os.getpid()}"
    stage = tmp + "-input"
    os.makedirs(stage)
    try:
        config = json.loads(Path(hf, "config.json").read_text())
        for name in ("config.json", "model.safetensors"):
            os.symlink(os.path.abspath(os.path.join(hf, name)), os.path.join(stage, name))
        words = {t: i for i, t in enumerate(vocab(int(config["vocab_size"])))}
        tokenizer: dict[str, Any] = {
            "version": "1.0", "truncation": None, "padding": None, "added_tokens": [], "normalizer": None,
            "pre_tokenizer": {"type": "WhitespaceSplit"}, "post_processor": None, "decoder": None,
            "model": {"type": "WordLevel", "vocab": words, "unk_token": "<unk>"},
        }
        Path(stage, "tokenizer.json").write_text(json.dumps(tokenizer))
        special = {"tokenizer_class": "PreTrainedTokenizerFast", "unk_token": "<unk>", "bos_token": "<s>",
                   "eos_token": "</s>"}
        Path(stage, "tokenizer_config.json").write_text(json.dumps(special))
        env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
        argv = [sys.executable, "-m", "onnxruntime_genai.models.builder", "-i", stage, "-o", tmp,
                "-p", precision, "-e", "cpu", "-c", stage + "-cache"]
        code = subprocess.call(argv, env=env)
        if code != 0 or not os.path.isfile(os.path.join(tmp, "genai_config.json")):
            print("ORCH_ERROR " + json.dumps({"kind": "conversion_failed", "message": f"model builder exit {code}"}))
            shutil.rmtree(tmp, ignore_errors=True)
            return 3
        Path(tmp, "orch_artifact.json").write_text(json.dumps({"precision": precision, **weight_bytes(tmp)}))
        os.rename(tmp, out)
        print("ORCH_CONVERTED " + out)
        return 0
    finally:
        shutil.rmtree(stage, ignore_errors=True)
        shutil.rmtree(stage + "-cache", ignore_errors=True)
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
