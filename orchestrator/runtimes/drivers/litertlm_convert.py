"""Convert the source HF llama folder to a LiteRT-LM model (``model.litertlm``), atomically.

Standalone (run by the litert-lm environment's Python): argv = HF_DIR OUT_DIR QUANTIZE, QUANTIZE one
of litert-torch's recipes (``none`` = fp32, ``dynamic_int8``, ``dynamic_int4_block32``, ...).

The model is re-authored with litert-torch's generative API exactly as its llama examples do
(`model_builder.DecoderOnlyModel` from the HF tensor names, the shape read from config.json),
exported to a multi-signature TFLite file (`prefill_<n>` for a few lengths plus `decode`, one
shared set of weights) with the KV cache in the transposed layout (BNTH keys / BNHT values), the
layout LiteRT-LM's CPU executor reads, then packed into a .litertlm with a tokenizer.

Tokenizer: orch's models are fed token ids, never text, and LiteRT-LM's sessions take text; so
the packed tokenizer is an HF word-level one in which id i is the word ``w<i>`` (whitespace
split, no normalizer, no special tokens, no start or stop token). Text ``"w5 w17"`` is exactly
ids [5, 17] and each decoded id reads back as its word: the driver's id <-> text map is exact.

Everything is written into OUT_DIR.tmp-<pid> and renamed to OUT_DIR only when complete, with
``orch_artifact.json`` (bytes a decode step reads, counted from the converted weights).
"""

import json
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

PREFILL_LENGTHS = (8, 32, 128, 512)


def word_tokenizer(vocab: int) -> dict[str, Any]:
    return {
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": [], "normalizer": None,
        "pre_tokenizer": {"type": "WhitespaceSplit"}, "post_processor": None,
        "decoder": None, "model": {"type": "WordLevel", "vocab": {f"w{i}": i for i in range(vocab)},
                                   "unk_token": "w0"},
    }


def model_config(hf: dict[str, Any]) -> Any:
    import litert_torch.generative.layers.model_config as cfg  # type: ignore[import-not-found]

    dim, heads = int(hf["hidden_size"]), int(hf["num_attention_heads"])
    attn = cfg.AttentionConfig(num_heads=heads, head_dim=dim // heads,
                               num_query_groups=int(hf.get("num_key_value_heads", heads)),
                               rotary_base=float(hf.get("rope_theta", 10000.0)), rotary_percentage=1.0)
    ff = cfg.FeedForwardConfig(type=cfg.FeedForwardType.GATED, activation=cfg.ActivationConfig(cfg.ActivationType.SILU),
                               intermediate_size=int(hf["intermediate_size"]))
    norm = cfg.NormalizationConfig(type=cfg.NormalizationType.RMS_NORM, epsilon=float(hf.get("rms_norm_eps", 1e-5)))
    block = cfg.TransformerBlockConfig(attn_config=attn, ff_config=ff, pre_attention_norm_config=norm,
                                       post_attention_norm_config=norm)
    return cfg.ModelConfig(vocab_size=int(hf["vocab_size"]), num_layers=int(hf["num_hidden_layers"]),
                           max_seq_len=int(hf["max_position_embeddings"]), embedding_dim=dim, block_configs=block,
                           final_norm_config=norm, lm_head_share_weight_with_embedding=bool(hf["tie_word_embeddings"]))


def weight_bytes(tflite: str) -> dict[str, int]:
    """Constant bytes a decode step reads, from the decode signature's subgraph: every constant
    tensor with its quantization scales, except that a table only ever gathered from (the embedding
    when the head is untied, the causal-mask cache) counts one row. A tied embedding is also the
    head's matrix, so it counts whole."""
    from ai_edge_litert import schema_py_generated as schema  # type: ignore[import-not-found]

    model = schema.ModelT.InitFromObj(schema.Model.GetRootAsModel(Path(tflite).read_bytes(), 0))
    decode = next(s.subgraphIndex for s in model.signatureDefs if s.signatureKey.decode() == "decode")
    graph = model.subgraphs[decode]
    ops = schema.BuiltinOperator
    table_input = {ops.GATHER: 0, ops.GATHER_ND: 0, ops.EMBEDDING_LOOKUP: 1}  # which input is the table
    codes = [max(c.builtinCode, c.deprecatedBuiltinCode) for c in model.operatorCodes]
    gathered: set[int] = set()
    other: set[int] = set()
    for op in graph.operators:
        at = table_input.get(codes[op.opcodeIndex])
        for k, i in enumerate(op.inputs):
            (gathered if k == at else other).add(int(i))
    total = table = 0
    for i, t in enumerate(graph.tensors):
        buf = model.buffers[t.buffer]
        size = len(buf.data) if buf.data is not None else int(buf.size or 0)
        if not size:
            continue
        q = t.quantization
        size += 4 * len(q.scale) if q is not None and q.scale is not None else 0
        if i in gathered and i not in other and t.shape is not None and len(t.shape):
            table += size
            total += size // int(t.shape[0])
        else:
            total += size
    return {"bytes_per_decode_token": total, "gathered_table_bytes": table}


def convert(hf_dir: str, tmp: str, quantize: str) -> str:
    from litert_torch.generative.layers import kv_cache
    from litert_torch.generative.utilities import converter, export_config, model_builder  # type: ignore[import-not-found]

    hf = json.loads(Path(hf_dir, "config.json").read_text())
    config = model_config(hf)
    context = int(hf["max_position_embeddings"])
    names = model_builder.TENSOR_NAMES if config.lm_head_share_weight_with_embedding \
        else model_builder.TENSOR_NAMES_WITH_SEPARATE_LM_HEAD
    model = model_builder.build_decoder_only_model(
        checkpoint_path=hf_dir, config=config, tensor_names=names, mask_cache_size=context)
    export = export_config.ExportConfig(kvcache_layout=kv_cache.KV_LAYOUT_TRANSPOSED)
    prefill = [n for n in PREFILL_LENGTHS if n < context] + [context]
    with tempfile.TemporaryDirectory(dir=tmp) as work:
        Path(work, "tokenizer.json").write_text(json.dumps(word_tokenizer(int(hf["vocab_size"]))))
        tflite = converter.convert_to_tflite(model, work, "model", prefill, context, quantize=quantize, config=config,
                                             export_config=export)
        facts = weight_bytes(tflite)
        from litert_torch.generative.utilities import litertlm_builder

        # The stop token is an id past the vocabulary: the model can never sample it (LiteRT-LM insists on one).
        litertlm_builder.build_litertlm(tflite_model_path=tflite, workdir=work, output_path=work,
                                        context_length=context,
                                        hf_tokenizer_model_path=str(Path(work, "tokenizer.json")),
                                        stop_token_ids=[int(hf["vocab_size"])])
        built = Path(work, Path(tflite).stem + ".litertlm")
        os.rename(built, Path(tmp, "model.litertlm"))
    return json.dumps({"quantize": quantize, "prefill_lengths": prefill, "context": context, **facts})


def main() -> int:
    hf, out, quantize = sys.argv[1], sys.argv[2], sys.argv[3]
    tmp = f"{out}.tmp-{os.getpid()}"
    os.makedirs(tmp)
    try:
        if not Path(hf, "config.json").is_file() or not Path(hf, "model.safetensors").is_file():
            print("ORCH_ERROR " + json.dumps({"kind": "conversion_failed",
                                              "message": f"no config.json + model.safetensors in {hf}"}))
            return 3
        facts = convert(hf, tmp, quantize)
        Path(tmp, "orch_artifact.json").write_text(facts)
        os.rename(tmp, out)
        print("ORCH_CONVERTED " + out)
        return 0
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
