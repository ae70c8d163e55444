"""Both worker kinds export their Stats as Prometheus metrics on --metrics-port, under Tandem's names and under
the vLLM names the llm-d / Gateway API Inference Extension endpoint picker scrapes."""

import asyncio
import time

import grpc
import httpx
import openai
import pytest
from prometheus_client.parser import text_string_to_metric_families

from proto.gen import worker_pb2, worker_pb2_grpc
from tests.conftest import free_port
from tests.integration.test_prefix_hints import PROMPT, generate
from tests.stack import start_worker_process

pytestmark = pytest.mark.integration
Samples = dict[str, tuple[dict[str, str], float]]
LONG_TOKENS = 900  # with the prompt, 59 of the 64 KV blocks: long enough to be seen running, and it fits


def parse(exposition: str) -> tuple[Samples, dict[str, str]]:
    """Samples by name (their labels and value) and each family's type, read as an EPP reads them."""
    samples, types = {}, {}
    for family in text_string_to_metric_families(exposition):
        types[family.name] = family.type
        for sample in family.samples:
            assert sample.name not in samples, f"{sample.name}: more than one series"
            samples[sample.name] = (sample.labels, sample.value)
    return samples, types


def scrape(port: int) -> tuple[Samples, dict[str, str]]:
    return parse(httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text)


async def scrape_while_busy(port: int, metrics_port: int) -> tuple[Samples, dict[str, str]]:
    """A scrape taken while one long request runs and a second waits behind it; both are then cancelled."""
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        stub = worker_pb2_grpc.WorkerStub(channel)
        sampling = worker_pb2.SamplingParams(max_tokens=LONG_TOKENS, ignore_eos=True)
        long = [worker_pb2.GenerateRequest(request_id=i, prompt_token_ids=PROMPT, sampling=sampling) for i in "ab"]
        calls = [stub.Generate(r) for r in long]  # started at once: the worker runs one and queues the other
        deadline = time.monotonic() + 10
        async with httpx.AsyncClient(timeout=5) as http:
            while True:
                scraped = parse((await http.get(f"http://127.0.0.1:{metrics_port}/metrics")).text)
                samples = scraped[0]
                if samples["tandem_worker_running"][1] >= 1 and samples["tandem_worker_queue_depth"][1] >= 1:
                    break
                assert time.monotonic() < deadline, f"never saw one running and one waiting: {samples}"
                await asyncio.sleep(0.01)
        for call in calls:
            call.cancel()
    return scraped


def check_openai_http(kind: str, metrics_port: int) -> None:
    """With --serve-openai (the cloud worker here), what an InferencePool's gateway sends is answered on the metrics
    port; without it (the edge agent here), nothing but /metrics is served there."""
    client = openai.OpenAI(base_url=f"http://127.0.0.1:{metrics_port}/v1", api_key="unused", max_retries=0)
    hi = [{"role": "user", "content": "hi"}]
    if kind != "cloud":
        with pytest.raises(openai.NotFoundError):
            client.chat.completions.create(model="tandem-demo", max_tokens=3, messages=hi)
        return
    answer = client.chat.completions.create(model="tandem-demo", max_tokens=3, messages=hi, temperature=0)
    assert answer.model == "tandem-demo" and answer.usage.completion_tokens == 3
    assert [m.id for m in client.models.list().data] == ["tandem-demo"]
    with pytest.raises(openai.NotFoundError, match="other-model"):
        client.chat.completions.create(model="other-model", max_tokens=3, messages=hi)


def check_no_max_tokens_near_the_context_is_answered(metrics_port: int, model_dir) -> None:
    """Without max_tokens, the answer fills the room the prompt leaves, as the gateway's does: the engine's own
    route (and the device's local agent) refused a prompt that left less than its default of 128 (a review)."""
    from serving.openai.chat_tokenizer import ChatTokenizer

    chat, words = ChatTokenizer(model_dir), 600
    while len(chat.encode_chat([{"role": "user", "content": "tell " * words}])) < 2048 - 40:
        words += 2
    client = openai.OpenAI(base_url=f"http://127.0.0.1:{metrics_port}/v1", api_key="unused", max_retries=0)
    answer = client.chat.completions.create(model="tandem-demo", messages=[{"role": "user", "content": "tell " * words}],
                                            extra_body={"ignore_eos": True})  # fmt: skip
    assert answer.choices[0].finish_reason == "length"
    assert answer.usage.prompt_tokens + answer.usage.completion_tokens == 2048 and answer.usage.completion_tokens < 128


def check_a_client_that_leaves_frees_the_engine(port: int, metrics_port: int) -> None:
    """Not streamed, the engine's own OpenAI route (--serve-openai, and the device's local agent) ran to max_tokens
    after its client left: retries after a proxy's timeouts piled up (a review). Now it stops as the client goes."""
    body = (b'{"model": "tandem-demo", "max_tokens": 2000, "ignore_eos": true, '
            b'"messages": [{"role": "user", "content": "tell me a long story"}]}')  # fmt: skip
    head = (f"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1:{metrics_port}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n")  # fmt: skip

    def stats() -> worker_pb2.StatsReply:
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            return worker_pb2_grpc.WorkerStub(channel).Stats(worker_pb2.StatsRequest(), timeout=5)

    async def leave() -> None:
        _, writer = await asyncio.open_connection("127.0.0.1", metrics_port)
        writer.write(head.encode() + body)
        await writer.drain()
        deadline = time.monotonic() + 30
        while stats().running == 0:
            assert time.monotonic() < deadline, "the request never reached the engine"
            await asyncio.sleep(0.05)
        writer.transport.abort()

    asyncio.run(leave())
    left = time.monotonic()
    while (now := stats()).running or now.kv_blocks_used:
        assert time.monotonic() - left < 1, now  # 2,000 tokens take 3 s and more here
        time.sleep(0.1)


@pytest.mark.parametrize("kind", ["cloud", "edge"])
def test_the_worker_exports_its_stats_as_prometheus_metrics(kind, demo_checkpoint, redis_url, tmp_path):
    port, metrics_port = free_port(), free_port()
    args = ["--model", str(demo_checkpoint), "--port", str(port), "--metrics-port", str(metrics_port)]
    if kind == "cloud":
        # One sequence at a time: a second request waits, so the waiting gauges have something to show.
        args += ["--num-kv-blocks", "160", "--max-num-seqs", "1", "--serve-openai"]
        worker = start_worker_process(["cloud-worker", *args], {"REDIS_URL": redis_url})
    else:  # the serial engine runs one request at a time anyway
        worker = start_worker_process(["edge-agent", *args, "--cache-dir", str(tmp_path)])
    try:
        asyncio.run(generate(port, "acme"))
        asyncio.run(generate(port, "acme"))
        samples, _ = scrape(metrics_port)
        busy, types = asyncio.run(scrape_while_busy(port, metrics_port))
        check_openai_http(kind, metrics_port)
        if kind == "cloud":
            check_a_client_that_leaves_frees_the_engine(port, metrics_port)
            check_no_max_tokens_near_the_context_is_answered(metrics_port, demo_checkpoint)
    finally:
        worker.terminate()
        worker.wait(timeout=15)
    labels, requests = samples["tandem_worker_requests_total"]
    assert requests == 2
    assert labels["kind"] == kind
    assert labels["execution_provider"] == ("torch-cpu" if kind == "cloud" else "CPUExecutionProvider")
    assert samples["tandem_worker_memory_watermark_bytes"][1] >= samples["tandem_worker_memory_bytes"][1] > 0
    if kind == "cloud":
        assert samples["tandem_worker_kv_blocks_total"][1] == 160
        assert samples["tandem_worker_prefix_hit_tokens_total"][1] == 32  # the second request's two cached blocks
    assert_the_endpoint_picker_sees_what_tandem_reports(kind, busy, types)


def assert_the_endpoint_picker_sees_what_tandem_reports(kind: str, busy: Samples, types: dict[str, str]) -> None:
    model = busy["tandem_worker_running"][0]["model"]
    for name in ("vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc"):
        assert types[name] == "gauge", name
        assert busy[name][0] == {"model_name": model}, name  # vLLM's label, the model id the worker serves
    assert model == "tandem-demo"
    assert busy["vllm:num_requests_running"][1] == busy["tandem_worker_running"][1] == 1
    assert busy["vllm:num_requests_waiting"][1] == busy["tandem_worker_queue_depth"][1] == 1
    used, total = busy["tandem_worker_kv_blocks_used"][1], busy["tandem_worker_kv_blocks_total"][1]
    usage = busy["vllm:kv_cache_usage_perc"][1]
    if kind == "cloud":
        assert 0 < usage == used / total <= 1  # a fraction, as vLLM's is, of the pool the running request holds
    else:
        assert usage == total == 0  # the serial engine has no KV pool: no usage, rather than a division by zero
    lora_labels, read_at = busy["vllm:lora_requests_info"]
    assert types["vllm:lora_requests_info"] == "gauge"
    assert lora_labels == {"running_lora_adapters": "", "waiting_lora_adapters": "", "max_lora": "0"}
    assert abs(read_at - time.time()) < 60  # a timestamp, as vLLM's: the EPP takes the newest series
