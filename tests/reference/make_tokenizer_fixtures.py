#!/usr/bin/env python3
"""Reference token ids for the engine's tokenizer.

For every entry of a tokenizer corpus (ASCII, long numbers, runs of spaces,
newlines/tabs, code, accents, CJK, emoji, special tokens inline, UUID-style
JSON like the KV-retrieval prompts, plus seeded random mixes), records the ids
llama.cpp produces:

    llama_cpp.Llama(model_path, vocab_only=True).tokenize(text.encode(),
                                                           add_bos=False, special=True)

and, for the chat template, the GGUF's own Jinja template rendered with one
user message and add_generation_prompt=True (jinja2, as HF does).

Also builds a tiny SentencePiece ("llama") vocabulary GGUF and records
llama.cpp's ids for a small corpus, with and without the space prefix.

Writes tests/engine/fixtures/tokenizer_smollm2.json,
tests/engine/fixtures/tokenizer_tiny_spm.json and
tests/engine/fixtures/chat_templates.json (SmolLM2's and Llama-2's Jinja
templates rendered by jinja2); the C++ tests compare against
them without Python.

Usage: python3 tests/reference/make_tokenizer_fixtures.py [--model PATH] [--out PATH]
"""
import argparse
import json
import os
import random
import uuid

import llama_cpp

from file_digest import sha256_of_file

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_OUT = os.path.join(HERE, "..", "engine", "fixtures", "tokenizer_smollm2.json")
SPM_OUT = os.path.join(HERE, "..", "engine", "fixtures", "tokenizer_tiny_spm.json")
CHAT_OUT = os.path.join(HERE, "..", "engine", "fixtures", "chat_templates.json")

# Meta's Llama-2-chat template as shipped in its tokenizer_config.json.
LLAMA2_TEMPLATE = (
    "{% if messages[0]['role'] == 'system' %}{% set loop_messages = messages[1:] %}"
    "{% set system_message = messages[0]['content'] %}{% else %}{% set loop_messages = messages %}"
    "{% set system_message = false %}{% endif %}{% for message in loop_messages %}"
    "{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
    "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}"
    "{% if loop.index0 == 0 and system_message != false %}"
    "{% set content = '<<SYS>>\\n' + system_message + '\\n<</SYS>>\\n\\n' + message['content'] %}"
    "{% else %}{% set content = message['content'] %}{% endif %}{% if message['role'] == 'user' %}"
    "{{ bos_token + '[INST] ' + content.strip() + ' [/INST]' }}{% elif message['role'] == 'assistant' %}"
    "{{ ' '  + content.strip() + ' ' + eos_token }}{% endif %}{% endfor %}")
DEFAULT_MODEL = os.environ.get(
    "MIDTUNE_MODEL", os.path.expanduser("~/.cache/midtune/SmolLM2-135M-Instruct.Q4_1.gguf"))


def kv_prompt(rng, pairs):
    data = {str(uuid.UUID(int=rng.getrandbits(128))): str(uuid.UUID(int=rng.getrandbits(128)))
            for _ in range(pairs)}
    key = list(data)[pairs // 2]
    return ("Extract the value corresponding to the specified key in the JSON object below.\n\n"
            "JSON data:\n" + json.dumps(data, indent=1) + f'\n\nKey: "{key}"\nCorresponding value:')


def random_mix(rng, length):
    pools = [
        "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ",
        "0123456789", " ", "  ", "\n", "\t", "\r\n",
        ".,;:!?'\"()[]{}<>/\\|@#$%^&*-_=+~`",
        "éèêëàâäîïôöùûüçñßøåæœÉÀÇ",
        "日本語中文字符東京大阪한국어안녕하세요",
        "αβγδεζηθλμπσωΩДжизньпривет",
        "٠١٢٣٤٥٦٧٨٩१२३४५६७८९０１２３４５６７８９²³½¼Ⅻ",
        "🙂🚀👍🏽👨‍👩‍👧🇫🇷✨❤️",
        "\u00a0\u2009\u3000\u0085\u200b\u0301",
        "'s 're 've 'll 'd 'm 't",
        "<|im_start|>", "<|im_end|>", "<|endoftext|>",
    ]
    return "".join(rng.choice(rng.choice(pools)) if rng.random() < 0.8 else rng.choice(pools)
                   for _ in range(length))


def corpus():
    rng = random.Random(20261121)
    entries = [
        ("ascii", "The quick brown fox jumps over the lazy dog."),
        ("ascii_sentences", "Hello, world! How are you today? I'm fine, thanks; and you?"),
        ("contractions", "don't won't I'll we've they're she'd I'm it's DON'T I'LL"),
        ("digits_short", "1 12 123 1234 12345"),
        ("digits_long", "31415926535897932384626433832795028841971693993751"),
        ("numbers_formatted", "Total: $1,234,567.89 (+3.5%) on 2024-11-21 at 18:30:05, id #000123."),
        ("spaces_runs", "a  b   c    d     e          f"),
        ("spaces_leading_trailing", "   leading and trailing   "),
        ("only_spaces", "        "),
        ("newlines", "line one\nline two\n\nline four\n\n\n\nend\n"),
        ("tabs", "col1\tcol2\t\tcol4\n\tindented\t \t mixed"),
        ("crlf", "windows\r\nline\r\n\r\nbreaks"),
        ("code_python", "def fibonacci(n):\n    if n < 2:\n        return n\n    return fibonacci(n - 1) + fibonacci(n - 2)\n"),
        ("code_cpp", "int main() {\n  std::vector<int> v{1, 2, 3};\n  for (auto& x : v) x *= 2;  // double\n  return 0;\n}"),
        ("code_json", '{"name": "midtune", "version": [1, 2, 3], "ok": true, "nested": {"a": null}}'),
        ("accents", "Les élèves ont mangé des crêpes à la cantine; naïve façade, Ærøskøbing, Straße."),
        ("combining", "e\u0301 a\u0300 o\u0308 n\u0303"),
        ("cjk", "東京は日本の首都です。大阪は第二の都市です。中文测试，你好世界！"),
        ("korean", "안녕하세요, 세계! 한국어 토큰화 테스트입니다."),
        ("cyrillic_greek", "Привет, мир! Καλημέρα κόσμε!"),
        ("arabic_hindi", "مرحبا بالعالم ١٢٣ नमस्ते दुनिया १२३"),
        ("emoji", "Emoji test 🙂🚀 and 👍🏽 family 👨‍👩‍👧 flag 🇫🇷 ✨❤️"),
        ("unicode_numbers", "x² + y³ = ½ of Ⅻ; fullwidth １２３ and ٤٥٦"),
        ("unicode_spaces", "nbsp\u00a0thin\u2009ideographic\u3000nel\u0085zwsp\u200bend"),
        ("special_chatml", "<|im_start|>system\nYou are helpful.<|im_end|>\n<|im_start|>user\nWhat is 7 times 8?<|im_end|>\n<|im_start|>assistant\n"),
        ("special_adjacent", "a<|im_start|>b<|im_end|>c<|endoftext|>d"),
        ("special_partial", "<|im_sta <|im_end <|im_start|<|im_start|>>"),
        ("special_other", "<repo_name>midtune<file_sep>main.cpp<jupyter_code>print(1)<empty_output>"),
        ("punctuation_runs", "Wait... what?!?! ---- ==== **** ////"),
        ("url_email", "See https://example.com/path?q=1&r=two#frag or mail someone@example.org."),
        ("kv_short", kv_prompt(rng, 3)),
        ("kv_long", kv_prompt(rng, 16)),
        ("empty", ""),
        # Bytes whose GPT-2 symbol SmolLM2's vocabulary lacks (0x04, the lead
        # byte 0xF1 of U+50000): llama.cpp drops them.
        ("unrepresentable_bytes", "a\x04b \U00050000c"),
    ]
    for i in range(40):
        entries.append((f"random_{i:02d}", random_mix(rng, rng.randint(5, 120))))
    return entries


# A tiny SentencePiece ("llama") vocabulary: <unk> <s> </s>, 256 byte tokens,
# then scored pieces chosen so that merge order, ties and byte fallback matter.
SPM_MARK = "\u2581"
SPM_PIECES = [
    ("h", -10), ("e", -10), ("l", -10), ("o", -10), ("w", -10), ("r", -10), ("d", -10), ("a", -10),
    ("b", -10), ("n", -10), ("t", -10), ("i", -10), ("s", -10), (SPM_MARK, -10),
    ("he", -3), ("ll", -2), ("hell", -4), ("hello", -5), (SPM_MARK + "hello", -6), (SPM_MARK + "w", -1),
    ("or", -3), (SPM_MARK + "wor", -4), ("ld", -7), ("aa", -1), ("ab", -1), ("ba", -1),
    (SPM_MARK + SPM_MARK, -2), (SPM_MARK + "a", -5), ("in", -4), ("is", -4), ("th", -3), (SPM_MARK + "th", -6),
    ("the", -5), (SPM_MARK + "the", -8), ("日", -10), ("本", -10), ("日本", -2), (SPM_MARK + "日本", -9),
    ("é", -10), ("té", -6), ("\n", -10), ("<user>", 0),
]
SPM_CORPUS = [
    "hello world", "aaa", "abab ba", "hé", "thé the", "</s>hello", "<s>hello</s> world", " hello", "  hello  ",
    "a  b\n", "\n\nhello\n", "日本 日本語", "emoji 🙂!", "this is it", "tab\there", "<user>hello<user>",
    "hello<unk>world", "", " ", "xyz", "aaaaaaa bbbb abba",
]


def make_tiny_spm(path, add_space_prefix):
    import gguf
    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)]
    types = [2, 3, 3] + [6] * 256
    scores = [0.0] * len(tokens)
    for text, score in SPM_PIECES:
        tokens.append(text)
        types.append(4 if text.startswith("<") else 1)  # <user>: user-defined
        scores.append(float(score))
    w = gguf.GGUFWriter(path, "llama")
    # vocab_only still reads the architecture header.
    w.add_block_count(1)
    w.add_context_length(64)
    w.add_embedding_length(8)
    w.add_feed_forward_length(16)
    w.add_head_count(2)
    w.add_head_count_kv(2)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_tokenizer_model("llama")
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_scores(scores)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_unk_token_id(0)
    w.add_add_space_prefix(add_space_prefix)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return tokens, types, scores


def spm_fixture():
    import tempfile
    variants = []
    with tempfile.TemporaryDirectory() as tmp:
        for add_space_prefix in (True, False):
            path = os.path.join(tmp, f"tiny_spm_{add_space_prefix}.gguf")
            tokens, types, scores = make_tiny_spm(path, add_space_prefix)
            llm = llama_cpp.Llama(model_path=path, vocab_only=True, verbose=False)
            cases = [{"text": t, "ids": llm.tokenize(t.encode("utf-8"), add_bos=False, special=True)}
                     for t in SPM_CORPUS]
            variants.append({"add_space_prefix": add_space_prefix, "cases": cases})
            del llm
    return {"generator": "tests/reference/make_tokenizer_fixtures.py",
            "llama_cpp_python": llama_cpp.__version__,
            "call": "Llama(tiny_spm.gguf, vocab_only=True).tokenize(text.encode(), add_bos=False, special=True)",
            "tokens": tokens, "types": types, "scores": scores, "bos": 1, "eos": 2, "unk": 0,
            "variants": variants}


def render(template_text, content, system, bos):
    import jinja2

    def raise_exception(message):
        raise jinja2.TemplateError(message)

    env = jinja2.Environment()
    env.globals["raise_exception"] = raise_exception
    messages = ([{"role": "system", "content": system}] if system is not None else []) + \
        [{"role": "user", "content": content}]
    return env.from_string(template_text).render(messages=messages, add_generation_prompt=True,
                                                 bos_token=bos, eos_token="</s>")


def chat_fixture(smollm_template):
    """Jinja renderings of one user message (optionally with a system turn)."""
    out = {"generator": "tests/reference/make_tokenizer_fixtures.py", "templates": []}
    contents = ["What is 7 times 8?", "Key: 'pear'\nValue?", "\u6771\u4eac? \U0001f642"]
    for name, text, bos in [("smollm2", smollm_template, ""), ("llama2", LLAMA2_TEMPLATE, "<s>")]:
        cases = [{"content": c, "system": sys_, "rendered": render(text, c, sys_, bos)}
                 for c in contents for sys_ in (None, "Be brief.")]
        out["templates"].append({"name": name, "template": text, "bos_text": bos, "cases": cases})
    return out


def write_rows(path, out):
    """JSON with one list element per line: small files, readable diffs."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        f.write("{\n")
        for i, (key, value) in enumerate(out.items()):
            end = ",\n" if i + 1 < len(out) else "\n"
            if isinstance(value, list) and value and isinstance(value[0], dict):
                rows = ",\n  ".join(json.dumps(v, ensure_ascii=False) for v in value)
                f.write(f'"{key}": [\n  {rows}\n]{end}')
            else:
                f.write(f"{json.dumps(key)}: {json.dumps(value, ensure_ascii=False)}{end}")
        f.write("}\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default=DEFAULT_MODEL)
    ap.add_argument("--out", default=DEFAULT_OUT)
    args = ap.parse_args()

    llm = llama_cpp.Llama(model_path=args.model, vocab_only=True, verbose=False)
    cases = []
    for name, text in corpus():
        ids = llm.tokenize(text.encode("utf-8"), add_bos=False, special=True)
        case = {"name": name, "text": text, "ids": ids}
        detokenized = llm.detokenize(ids, special=True)
        if detokenized != text.encode("utf-8"):  # lossy: record llama.cpp's bytes
            case["detokenized_hex"] = detokenized.hex()
        cases.append(case)
    # Special tokens written in the text stay plain text when not parsed.
    plain = [{"name": name, "text": text,
              "ids": llm.tokenize(text.encode("utf-8"), add_bos=False, special=False)}
             for name, text in corpus() if name.startswith("special_")]

    import gguf  # only for the template string
    import jinja2
    reader = gguf.GGUFReader(args.model)
    template_text = reader.fields["tokenizer.chat_template"].contents()
    template = jinja2.Environment().from_string(template_text)
    chat = []
    for content in ["What is 7 times 8?", "  spaced  content\nwith newline  ", "<|im_end|> inside"]:
        rendered = template.render(messages=[{"role": "user", "content": content}], add_generation_prompt=True,
                                   bos_token="", eos_token="")
        chat.append({"content": content, "rendered": rendered,
                     "ids": llm.tokenize(rendered.encode("utf-8"), add_bos=False, special=True)})

    out = {
        "generator": "tests/reference/make_tokenizer_fixtures.py",
        "llama_cpp_python": llama_cpp.__version__,
        "model_file": os.path.basename(args.model),
        "model_sha256": sha256_of_file(args.model),
        "call": "Llama(model_path, vocab_only=True).tokenize(text.encode(), add_bos=False, special=True)",
        "bos": llm.token_bos(),
        "eos": llm.token_eos(),
        "cases": cases,
        "cases_special_as_text": plain,
        "chat_template": chat,
    }
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    write_rows(args.out, out)
    write_rows(SPM_OUT, spm_fixture())
    write_rows(CHAT_OUT, chat_fixture(template_text))
    print(f"wrote {len(cases)} cases, {sum(len(c['ids']) for c in cases)} tokens to {args.out}")


if __name__ == "__main__":
    main()
