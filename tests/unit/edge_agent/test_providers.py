"""Execution-provider choice: priority order, honest reporting, strict NPU mode."""

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
