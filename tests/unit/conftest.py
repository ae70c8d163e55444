import pytest

from cloud_worker.build import build_engine
from cloud_worker.engine.config import EngineConfig
from cloud_worker.loader import load_model
from tandem.checkpoint import load_tokenizer
from tandem.serial_engine import SerialEngine
from tests.unit.test_serial_engine import CountingStepModel


@pytest.fixture(scope="module", params=["cloud", "edge"])
def engine(request, demo_checkpoint):
    """Each engine kind on the demo checkpoint in fp32: the paged engine, and the serial engine the edge runs."""
    if request.param == "cloud":
        engine = build_engine(demo_checkpoint, config=EngineConfig(num_kv_blocks=128))
    else:
        model = CountingStepModel(load_model(demo_checkpoint))
        engine = SerialEngine(model, load_tokenizer(demo_checkpoint), (2,), "tandem-demo", "edge", "torch-cpu")
    yield engine
    engine.close()
