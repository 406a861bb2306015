import pytest


@pytest.fixture(autouse=True)
def mlflow_reader_environment(monkeypatch):
    """The tests read MLflow file stores with MLflow's own client, which refuses file stores since
    MLflow 3 unless told, and would start its usage telemetry at import unless told."""
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    monkeypatch.setenv("MLFLOW_DISABLE_TELEMETRY", "true")
