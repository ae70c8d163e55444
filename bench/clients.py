"""lm-eval's `local-completions` model against Tandem, and its `hf` model on the same checkpoint, same task.

A client nobody here wrote: EleutherAI's lm-evaluation-harness scores multiple-choice answers by
log-likelihood, through `/v1/completions` with `echo: true, logprobs: 1, max_tokens: 1` and the prompt as
token ids (`[[ids]]`), then reads `token_logprobs` and `top_logprobs` of the continuation's tokens. The
task is a local file built here (no download): 40 questions from the demo model's own paragraph, each
asking which of four continuations follows a context (the true one and three from elsewhere in the
text). The local stack (gateway, cloud worker, edge agent; the default policy sends these short public
prompts to the cloud worker) answers for Tandem; lm-eval's `hf` model runs the checkpoint in
transformers for the peer. The cloud engine's greedy and prompt log-probabilities equal HF's, so the two
accuracies must be equal; the bench prints both, the largest per-choice log-likelihood difference, and
the time each took. Tandem runs twice: one prompt a request, then lm-eval's batches (`--batch-size`, 8: a
list of prompts a request, as OpenAI's API takes them). Needs `pip install -e '.[bench]'` (lm-eval). Last line: one JSON object.

    python bench/clients.py
"""

import argparse
import json
import os
import random
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.privacy import cpu_info  # noqa: E402
from tandem.demo_model import CORPUS_PATH, cached_demo_checkpoint  # noqa: E402
from tandem.stack import start_local_stack  # noqa: E402
from tests.conftest import free_port  # noqa: E402
from tests.stack import write_policy  # noqa: E402

os.environ.setdefault("HF_DATASETS_OFFLINE", "1")  # the task is a local file: nothing to download
CACHE = Path.home() / ".cache" / "tandem" / "bench" / "tandem-demo"
TASK = "tandem_demo_continuation"


def write_task(folder: Path, count: int, seed: int = 0) -> Path:
    words = CORPUS_PATH.read_text().split()
    rng = random.Random(seed)
    rows = []
    for _ in range(count):
        start = rng.randrange(0, len(words) - 14)
        context, truth = " ".join(words[start : start + 8]), " ".join(words[start + 8 : start + 11])
        others = set()
        while len(others) < 3:
            other = rng.randrange(0, len(words) - 3)
            candidate = " ".join(words[other : other + 3])  # lm-eval puts a space between context and choice
            if candidate != truth:
                others.add(candidate)
        choices = [truth, *sorted(others)]
        rng.shuffle(choices)
        rows.append({"context": context, "choices": choices, "label": choices.index(truth)})
    data = folder / "data.jsonl"
    data.write_text("".join(json.dumps(row) + "\n" for row in rows))
    (folder / f"{TASK}.yaml").write_text(
        f"task: {TASK}\n"
        "dataset_path: json\n"
        f"dataset_kwargs:\n  data_files:\n    test: {data}\n"
        "test_split: test\n"
        "output_type: multiple_choice\n"
        'doc_to_text: "{{context}}"\n'
        'doc_to_choice: "{{choices}}"\n'
        'doc_to_target: "{{label}}"\n'
        "metric_list:\n  - metric: acc\n"
    )
    return folder


def evaluate(
    model: str, model_args: str, tasks_dir: Path, batch_size: int = 1
) -> tuple[dict, list[list[float]], float]:
    import lm_eval
    from lm_eval.tasks import TaskManager

    started = time.perf_counter()
    out = lm_eval.simple_evaluate(
        model=model,
        model_args=model_args,
        tasks=[TASK],
        task_manager=TaskManager(include_path=str(tasks_dir)),
        log_samples=True,
        batch_size=batch_size,
    )
    elapsed = time.perf_counter() - started
    samples = out["samples"][TASK]
    loglik = [[float(r[0]) for r in sample["filtered_resps"]] for sample in sorted(samples, key=lambda s: s["doc_id"])]
    return out["results"][TASK], loglik, elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--questions", type=int, default=40)
    parser.add_argument(
        "--batch-size", type=int, default=8, help="lm-eval's batch for the second Tandem run (a list of prompts)"
    )
    args = parser.parse_args()
    cpu, flags = cpu_info()
    checkpoint = cached_demo_checkpoint(CACHE)
    with tempfile.TemporaryDirectory(prefix="tandem-clients-") as tmp:
        work = Path(tmp)
        (work / "tasks").mkdir()
        tasks = write_task(work / "tasks", args.questions)
        policy = write_policy(work / "policy.yaml", free_port(), free_port())
        stack = start_local_stack(checkpoint, policy, work, free_port())
        try:
            model_args = (
                f"model={checkpoint.name},base_url={stack.url}/v1/completions,tokenizer={checkpoint},"
                "tokenized_requests=True,max_retries=1"
            )
            tandem, tandem_ll, tandem_s = evaluate("local-completions", model_args, tasks)
            batched, batched_ll, batched_s = evaluate("local-completions", model_args, tasks, args.batch_size)
        finally:
            stack.stop()
        hf, hf_ll, hf_s = evaluate("hf", f"pretrained={checkpoint},dtype=float32,device=cpu", tasks)
    diff = max(
        abs(a - b) for row_t, row_h in zip(tandem_ll, hf_ll, strict=True) for a, b in zip(row_t, row_h, strict=True)
    )
    batched_diff = max(
        abs(a - b) for row_b, row_h in zip(batched_ll, hf_ll, strict=True) for a, b in zip(row_b, row_h, strict=True)
    )
    print(f"{cpu} ({', '.join(flags)}): {args.questions} questions, 4 choices each")
    print(f"  tandem (lm-eval local-completions): acc {tandem['acc,none']:.3f} in {tandem_s:.1f} s")
    print(f"  tandem, lm-eval batches of {args.batch_size}:    acc {batched['acc,none']:.3f} in {batched_s:.1f} s")
    print(f"  transformers (lm-eval hf):          acc {hf['acc,none']:.3f} in {hf_s:.1f} s")
    result = {
        "cpu": cpu,
        "isa": flags,
        "questions": args.questions,
        "acc_tandem": round(tandem["acc,none"], 4),
        "acc_hf": round(hf["acc,none"], 4),
        "acc_equal": tandem["acc,none"] == hf["acc,none"],
        "max_loglikelihood_diff": round(diff, 6),
        "batch_size": args.batch_size,
        "acc_tandem_batched": round(batched["acc,none"], 4),
        "max_loglikelihood_diff_batched": round(batched_diff, 6),
        "seconds_tandem_batched": round(batched_s, 1),
        "seconds_tandem": round(tandem_s, 1),
        "seconds_hf": round(hf_s, 1),
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
