"""Execution-provider choice: priority order, honest reporting, strict NPU mode."""

import tempfile

import onnxruntime as ort
import pytest

from edge_agent.providers import DEFAULT_PRIORITY, NPU_PROVIDERS, ProviderError, choose_providers, create_session

CASES = [
    # (available in the onnxruntime build, expected request order)
    (["CPUExecutionProvider"], ("CPUExecutionProvider",)),
    (["CUDAExecutionProvider", "CPUExecutionProvider"], ("CUDAExecutionProvider", "CPUExecutionProvider")),
    (["CPUExecutionProvider", "QNNExecutionProvider"], ("QNNExecutionProvider", "CPUExecutionProvider")),
    (
        ["OpenVINOExecutionProvider", "CoreMLExecutionProvider", "CPUExecutionProvider"],
        ("OpenVINOExecutionProvider", "CoreMLExecutionProvider", "CPUExecutionProvider"),
    ),
]


@pytest.mark.parametrize("available, expected", CASES)
def test_npu_first_cpu_last(available, expected):
    choice = choose_providers(DEFAULT_PRIORITY, available)
    assert choice.requested == expected
    assert set(choice.skipped) == set(DEFAULT_PRIORITY) - set(available)


def test_no_acceptable_provider_names_what_exists():
    with pytest.raises(ProviderError, match="CPUExecutionProvider"):
        choose_providers(("QNNExecutionProvider",), ["CPUExecutionProvider"])


def test_session_reports_the_provider_that_really_runs(demo_checkpoint, tmp_path):
    from edge_agent.export import export_onnx

    path = export_onnx(demo_checkpoint, tmp_path / "onnx", show_progress=False) / "model.onnx"
    session, actual = create_session(str(path))
    assert actual == session.get_providers()[0]
    assert actual == choose_providers(DEFAULT_PRIORITY, ort.get_available_providers()).requested[0]


@pytest.mark.skipif(any(p in ort.get_available_providers() for p in NPU_PROVIDERS), reason="this machine has an NPU EP")
def test_require_npu_fails_at_start_without_one(demo_checkpoint, tmp_path):
    from edge_agent.export import export_onnx

    path = export_onnx(demo_checkpoint, tmp_path / "onnx", show_progress=False) / "model.onnx"
    with pytest.raises(ProviderError, match="--require-npu"):
        create_session(str(path), require_npu=True)


@pytest.mark.parametrize(
    ("name", "meant"),
    [("QnnExecutionProvider", "QNNExecutionProvider"), ("coreml", "CoreMLExecutionProvider"), ("NPU", None)],
)
def test_an_unknown_provider_name_is_refused_not_skipped(name, meant):
    """An edge review: a typo in --providers was "not in this onnxruntime build" at INFO, and the model ran on the
    CPU."""
    with pytest.raises(ProviderError, match=f"unknown execution provider '{name}'") as refused:
        choose_providers((name, "CPUExecutionProvider"), ["CPUExecutionProvider"])
    assert (f"did you mean {meant}?" in str(refused.value)) if meant else "did you mean" not in str(refused.value)


@pytest.mark.skipif("QNNExecutionProvider" in ort.get_available_providers(), reason="this machine has QNN")
def test_an_operators_first_choice_passed_over_is_a_warning(demo_checkpoint, tmp_path, caplog):
    from edge_agent.export import export_onnx

    path = export_onnx(demo_checkpoint, tmp_path / "onnx", show_progress=False) / "model.onnx"
    with caplog.at_level("INFO", logger="edge_agent.providers"):
        _, actual = create_session(str(path), ("QNNExecutionProvider", "CPUExecutionProvider"))
    assert actual == "CPUExecutionProvider"
    warned = [r for r in caplog.records if r.levelname == "WARNING"]
    assert (
        warned
        and "QNNExecutionProvider skipped" in warned[0].getMessage()
        and "running on CPU" in warned[0].getMessage()
    )
    caplog.clear()
    with caplog.at_level("INFO", logger="edge_agent.providers"):
        create_session(str(path))  # the default list: NPUs first wherever there are none is no news
    assert not [r for r in caplog.records if r.levelname == "WARNING"]


@pytest.mark.skipif("AzureExecutionProvider" not in ort.get_available_providers(), reason="no Azure EP in this build")
def test_the_provider_reported_is_the_one_that_runs_the_model_not_the_first_registered(
    demo_checkpoint, tmp_path, caplog, monkeypatch
):
    """onnxruntime's wheel has AzureExecutionProvider, which takes no node of this graph: registered first, it was
    what the log, Stats, /readyz, the metrics and the registration said, while the CPU ran every node (a review)."""
    from edge_agent.export import export_onnx
    from edge_agent.registration import device
    from edge_agent.runner import OnnxStepModel

    export = export_onnx(demo_checkpoint, tmp_path / "onnx", show_progress=False)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # where the first run's profile goes
    with caplog.at_level("INFO", logger="edge_agent.providers"):
        model = OnnxStepModel(export, ("AzureExecutionProvider", "CPUExecutionProvider"))
    assert model.session.get_providers()[0] == "AzureExecutionProvider"
    assert model.execution_provider == "CPUExecutionProvider"
    assert any("CPUExecutionProvider runs the model" in r.getMessage() for r in caplog.records)
    assert not list(tmp_path.glob("tandem-placement-*"))  # the profile is read and removed
    assert device(model.execution_provider)["npu"] is False


def test_an_agent_reports_an_npu_only_where_one_runs_its_model():
    from edge_agent.registration import device

    assert device("QNNExecutionProvider")["npu"] is True
    assert device("CPUExecutionProvider")["npu"] is False


def test_the_provider_with_the_most_kernel_time_is_the_one_reported(tmp_path):
    """A compiling NPU provider profiles each partition it takes as one fused node of its own name: counted by
    op, it had no work and four shape ops left on the CPU won (a review). onnxruntime's profile format."""
    import json

    from edge_agent import providers

    folder = tmp_path / f"{providers._PLACEMENT}x"
    folder.mkdir()
    events = [{"cat": "Session", "name": "model_run", "dur": 5000, "args": {}}]
    events.append({"cat": "Node", "name": "QNNExecutionProvider_QNN_0_0_kernel_time", "dur": 4000,
                   "args": {"op_name": "QNNExecutionProvider_QNN_0", "provider": "QNNExecutionProvider"}})  # fmt: skip
    events += [{"cat": "Node", "name": f"/Shape_{i}_kernel_time", "dur": 3,
                "args": {"op_name": "Shape", "provider": "CPUExecutionProvider"}} for i in range(4)]  # fmt: skip
    (folder / "run.json").write_text(json.dumps(events))

    class ProfiledSession:  # what ran_on reads of an InferenceSession
        def get_session_options(self):
            options = ort.SessionOptions()
            options.enable_profiling, options.profile_file_prefix = True, str(folder / "run")
            return options

        def end_profiling(self):
            return str(folder / "run.json")

    assert providers.ran_on(ProfiledSession(), "QNNExecutionProvider", require_npu=True) == "QNNExecutionProvider"
    assert not folder.exists()
