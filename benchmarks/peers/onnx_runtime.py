"""An MLServer 1.7.1 runtime serving an ONNX file with onnxruntime (MLServer ships none).

Runs inside benchmarks/peers/.venv-mlserver, imported by MLServer through the
``implementation`` string of model-settings.json. Kept as plain as MLServer's
own runtimes: decode the V2 request with NumpyCodec, run, encode.
"""

from __future__ import annotations

import onnxruntime as ort
from mlserver import MLModel
from mlserver.codecs import NumpyCodec
from mlserver.types import InferenceRequest, InferenceResponse
from mlserver.utils import get_model_uri


class OnnxModel(MLModel):
    async def load(self) -> bool:
        uri = await get_model_uri(self._settings)
        self._session = ort.InferenceSession(uri, providers=["CPUExecutionProvider"])
        self._inputs = [i.name for i in self._session.get_inputs()]
        self._outputs = [o.name for o in self._session.get_outputs()]
        return True

    async def predict(self, payload: InferenceRequest) -> InferenceResponse:
        feed = {i.name: NumpyCodec.decode_input(i) for i in payload.inputs}
        outs = self._session.run(self._outputs, feed)
        return InferenceResponse(
            model_name=self.name,
            outputs=[NumpyCodec.encode_output(name, arr) for name, arr in zip(self._outputs, outs, strict=True)],
        )
