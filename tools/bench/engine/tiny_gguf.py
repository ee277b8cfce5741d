#!/usr/bin/python3
"""Write a tiny llama-architecture GGUF with random weights.

    PYTHONPATH=<llama.cpp>/gguf-py /usr/bin/python3 tiny_gguf.py OUT.gguf [--dim N ...]

The model is a real llama graph (RMSNorm, RoPE attention with grouped KV
heads, SwiGLU FFN) whose weights are random (fixed seed, so the file is the
same on every run): llama-server does the real matmuls, the text is noise.

The tokenizer is a llama SPM vocabulary generated here: <unk>, <s>, </s>,
the 256 byte tokens, and "▁word" for every word of bpfbench's random
dataset (loadgen/dataset.go) together with every prefix of it ("▁w", "▁wo",
...: SPM merges pairs, so each word needs its prefixes) and the lower-case
letters. A random-dataset prompt of N words is N tokens (plus BOS).

Greedy decoding (bpfbench load sends temperature 0) never picks a token
whose text is empty or not valid UTF-8 on its own: the output rows of the
control tokens and of the byte tokens are zero, while the largest logit of
the ~1000 word tokens is always positive. So every generated token is one
non-empty SSE chunk. </s> is the EOS token; bpfbench load sends ignore_eos
(the server then bans it), and its zero row keeps it unpicked without that.
"""

import argparse
import sys

import numpy as np

try:
    import yaml  # noqa: F401  (gguf.metadata imports it; unused here)
except ImportError:  # python3-yaml missing: gguf-py only needs it for model cards
    import types
    sys.modules["yaml"] = types.ModuleType("yaml")

import gguf

# loadgen/dataset.go's vocabulary (single-token English words).
WORDS = """the of and to in is was for on are with as at be by this have from or one had
not but what all were when we there can an your which their said if do will each about how up out them then she
many some so these would other into has more her two like him see time could no make than first been its who now
people my made over did down only way find use may water long little very after words called just where most know
get through back much before go good new write our used me man too any day same right look think also around
another came come work three word must because does part even place well such here take why things help put years
different away again off went old number great tell men say small every found still between name should home big
give air line set own under read last never us left end along while might next sound below saw something thought
both few those always looked show large often together asked house world going want school important until form food
keep children feet land side without boy once animals life enough took sometimes four head above kind began almost
live page got earth need far hand high year mother light parts country father let night following picture being study""".split()

SPACE = "\u2581"  # SentencePiece's "▁"


def vocabulary():
    tokens = ["<unk>", "<s>", "</s>"]
    types = [gguf.TokenType.UNKNOWN, gguf.TokenType.CONTROL, gguf.TokenType.CONTROL]
    scores = [0.0, 0.0, 0.0]
    for b in range(256):
        tokens.append("<0x%02X>" % b)
        types.append(gguf.TokenType.BYTE)
        scores.append(0.0)
    pieces = {SPACE}
    pieces.update("abcdefghijklmnopqrstuvwxyz")
    for w in WORDS:
        for i in range(1, len(w) + 1):
            pieces.add(SPACE + w[:i])
    # Longer pieces merge first (higher score), as a trained SPM model would.
    for p in sorted(pieces, key=lambda p: (len(p), p)):
        tokens.append(p)
        types.append(gguf.TokenType.NORMAL)
        scores.append(-1000.0 + len(p))
    return tokens, types, scores


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out")
    ap.add_argument("--dim", type=int, default=512)
    ap.add_argument("--layers", type=int, default=6)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--kv-heads", type=int, default=4)
    ap.add_argument("--ffn", type=int, default=1536)
    ap.add_argument("--ctx", type=int, default=8192)
    ap.add_argument("--type", choices=["f16", "f32"], default="f16",
                    help="type of the matrices (norms are always f32)")
    ap.add_argument("--seed", type=int, default=20261201)
    a = ap.parse_args()
    if a.dim % a.heads or a.heads % a.kv_heads:
        sys.exit("tiny_gguf.py: --dim must be a multiple of --heads, --heads of --kv-heads")

    rng = np.random.default_rng(a.seed)
    tokens, types, scores = vocabulary()
    n_vocab = len(tokens)
    head_dim = a.dim // a.heads
    kv_dim = head_dim * a.kv_heads
    mtype = np.float16 if a.type == "f16" else np.float32

    def mat(rows, cols):  # numpy (rows, cols) = ggml ne [cols, rows]; y = W x
        return (rng.standard_normal((rows, cols), dtype=np.float32) / np.sqrt(cols)).astype(mtype)

    def norm(n):
        return (1.0 + 0.1 * rng.standard_normal(n, dtype=np.float32)).astype(np.float32)

    w = gguf.GGUFWriter(a.out, "llama")
    w.add_name("bpfbench tiny llama (random weights)")
    w.add_file_type(gguf.LlamaFileType.MOSTLY_F16 if a.type == "f16" else gguf.LlamaFileType.ALL_F32)
    w.add_vocab_size(n_vocab)
    w.add_context_length(a.ctx)
    w.add_embedding_length(a.dim)
    w.add_block_count(a.layers)
    w.add_feed_forward_length(a.ffn)
    w.add_head_count(a.heads)
    w.add_head_count_kv(a.kv_heads)
    w.add_rope_dimension_count(head_dim)
    w.add_rope_freq_base(10000.0)
    w.add_layer_norm_rms_eps(1e-5)

    w.add_tokenizer_model("llama")
    w.add_tokenizer_pre("default")
    w.add_token_list(tokens)
    w.add_token_scores(scores)
    w.add_token_types(types)
    w.add_unk_token_id(0)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_add_bos_token(True)
    w.add_add_space_prefix(True)
    # Chat requests: the messages' contents, one after the other.
    w.add_chat_template("{% for m in messages %}{{ m['content'] }}\n{% endfor %}")

    w.add_tensor("token_embd.weight", mat(n_vocab, a.dim))
    for i in range(a.layers):
        p = "blk.%d." % i
        w.add_tensor(p + "attn_norm.weight", norm(a.dim))
        w.add_tensor(p + "attn_q.weight", mat(a.dim, a.dim))
        w.add_tensor(p + "attn_k.weight", mat(kv_dim, a.dim))
        w.add_tensor(p + "attn_v.weight", mat(kv_dim, a.dim))
        w.add_tensor(p + "attn_output.weight", mat(a.dim, a.dim))
        w.add_tensor(p + "ffn_norm.weight", norm(a.dim))
        w.add_tensor(p + "ffn_gate.weight", mat(a.ffn, a.dim))
        w.add_tensor(p + "ffn_up.weight", mat(a.ffn, a.dim))
        w.add_tensor(p + "ffn_down.weight", mat(a.dim, a.ffn))
    w.add_tensor("output_norm.weight", norm(a.dim))
    out = mat(n_vocab, a.dim)
    out[: 3 + 256] = 0  # control and byte tokens: never the greedy choice
    w.add_tensor("output.weight", out)

    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    params = n_vocab * a.dim * 2 + a.layers * (2 * a.dim * a.dim + 2 * kv_dim * a.dim + 3 * a.dim * a.ffn)
    print("%s: llama, vocab %d, dim %d, %d layers, ffn %d, heads %d/%d, %.1fM parameters, %s"
          % (a.out, n_vocab, a.dim, a.layers, a.ffn, a.heads, a.kv_heads, params / 1e6, a.type))


if __name__ == "__main__":
    main()
