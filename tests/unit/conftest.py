import pytest

from cloud_worker.build import build_engine
from cloud_worker.engine.config import EngineConfig
from edge_agent.serial_engine import SerialEngine
from modeling.loader import load_model
from serving.checkpoint import load_tokenizer
from tests.unit.edge_agent.test_serial_engine import CountingStepModel


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
