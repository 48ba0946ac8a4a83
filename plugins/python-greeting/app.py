"""A Setpoint reconciler written in Python: Greeting (demo.setpoint.dev/v1).

spec.name -> status.message = "Hello, NAME" and status.observedGeneration.
Built into a WebAssembly component with componentize-py; see README.md.
"""

import json

# The CRD, embedded by build.sh from crds/greeting.json: imported here, at
# build time (componentize-py pre-initialises the module), so the component
# reads no file at run time.
from crd_json import CRD

import wit_world
from wit_world.imports import host
from wit_world.imports.types import KindRef, Manifest, ReconcileError_Permanent, Response
from componentize_py_types import Err

class WitWorld(wit_world.WitWorld):
    def manifest(self) -> Manifest:
        return Manifest(
            name="python-greeting",
            version="0.1.0",
            reconciles=KindRef(api_version="demo.setpoint.dev/v1", kind="Greeting"),
            owns=[],
            definitions=[CRD],
            finalizer=None,
            destinations=[],
            secrets=[],
        )

    def reconcile(self, req) -> Response:
        obj = json.loads(req.object)
        spec = obj.get("spec") or {}
        name = spec.get("name")
        if not isinstance(name, str) or not name:
            raise Err(ReconcileError_Permanent("spec.name must be a non-empty string"))
        message = f"Hello, {name}"
        generation = (obj.get("metadata") or {}).get("generation", 0)
        status = obj.get("status") or {}
        if status.get("message") != message or status.get("observedGeneration") != generation:
            host.log(host.Level.INFO, f"greeting {name}")
        patch = {"message": message, "observedGeneration": generation}
        return Response(
            children=None,
            status=json.dumps(patch),
            events=[],
            requeue_after_ms=None,
            remove_finalizer=False,
            observe=[],
            effects=[],
        )
