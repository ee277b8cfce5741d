#!/usr/bin/python3
"""The request path of vLLM's benchmark client, for the client-efficiency
comparison: async_request_openai_completions of vLLM's
benchmarks/backend_request_func.py (aiohttp, one ClientSession per request,
the response read line by line with `async for chunk_bytes in
response.content`, "data: " stripped, json.loads per message, a
perf_counter timestamp per chunk with choices, usage read from the
usage-only chunk). All STREAMS requests are sent at once.

    /usr/bin/python3 tools/bench/loadgen/aiohttp_client.py URL STREAMS TOKENS [MODEL]

Needs python3-aiohttp (Debian). Prints the chunks received and the CPU time
of this process.
"""
import asyncio
import json
import resource
import sys
import time

import aiohttp

AIOHTTP_TIMEOUT = aiohttp.ClientTimeout(total=6 * 60 * 60)


class RequestFuncOutput:
    def __init__(self):
        self.generated_text = ""
        self.success = False
        self.latency = 0.0
        self.output_tokens = 0
        self.ttft = 0.0
        self.itl = []
        self.prompt_len = 0
        self.error = ""


async def async_request_openai_completions(api_url, model, prompt, prompt_len, output_len, ignore_eos=True):
    async with aiohttp.ClientSession(trust_env=True, timeout=AIOHTTP_TIMEOUT) as session:
        payload = {
            "model": model,
            "prompt": prompt,
            "temperature": 0.0,
            "max_tokens": output_len,
            "logprobs": None,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        if ignore_eos:
            payload["ignore_eos"] = ignore_eos
        headers = {"Authorization": "Bearer none"}
        output = RequestFuncOutput()
        output.prompt_len = prompt_len
        generated_text = ""
        st = time.perf_counter()
        most_recent_timestamp = st
        try:
            async with session.post(url=api_url, json=payload, headers=headers) as response:
                if response.status == 200:
                    first_chunk_received = False
                    async for chunk_bytes in response.content:
                        chunk_bytes = chunk_bytes.strip()
                        if not chunk_bytes:
                            continue
                        chunk = chunk_bytes.decode("utf-8").removeprefix("data: ")
                        if chunk != "[DONE]":
                            data = json.loads(chunk)
                            # NOTE: Some completion API might have a last
                            # usage summary response without a token so we
                            # want to check a token was generated
                            if choices := data.get("choices"):
                                # Note that text could be empty here
                                # e.g. for special tokens
                                text = choices[0].get("text")
                                timestamp = time.perf_counter()
                                # First token
                                if not first_chunk_received:
                                    first_chunk_received = True
                                    ttft = time.perf_counter() - st
                                    output.ttft = ttft
                                # Decoding phase
                                else:
                                    output.itl.append(timestamp - most_recent_timestamp)
                                most_recent_timestamp = timestamp
                                generated_text += text or ""
                            elif usage := data.get("usage"):
                                output.output_tokens = usage.get("completion_tokens")
                    if first_chunk_received:
                        output.success = True
                    else:
                        output.success = False
                        output.error = "Never received a valid chunk to calculate TTFT."
                    output.generated_text = generated_text
                    output.latency = most_recent_timestamp - st
                else:
                    output.error = response.reason or ""
                    output.success = False
        except Exception as e:  # noqa: BLE001 (as vLLM: the failure is recorded)
            output.success = False
            output.error = repr(e)
    return output


async def main():
    url = sys.argv[1].rstrip("/")
    if not url.endswith("/completions"):
        url += "/v1/completions"
    streams = int(sys.argv[2])
    tokens = int(sys.argv[3])
    model = sys.argv[4] if len(sys.argv) > 4 else "llmsim"
    prompt = " ".join(["a"] * 16)
    r0 = resource.getrusage(resource.RUSAGE_SELF)
    t0 = time.perf_counter()
    outs = await asyncio.gather(*(async_request_openai_completions(url, model, prompt, 16, tokens)
                                  for _ in range(streams)))
    wall = time.perf_counter() - t0
    r1 = resource.getrusage(resource.RUSAGE_SELF)
    cpu = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
    ok = sum(o.success for o in outs)
    chunks = sum(len(o.itl) + 1 for o in outs if o.success)
    errs = {o.error for o in outs if not o.success}
    print(f"aiohttp: {ok}/{streams} ok, {chunks} chunks in {wall:.2f} s, {cpu:.3f} CPU-s (streaming), "
          f"{chunks / cpu if cpu else 0:,.0f} chunks/CPU-s" + (f"; errors: {sorted(errs)[:3]}" if errs else ""))


asyncio.run(main())
