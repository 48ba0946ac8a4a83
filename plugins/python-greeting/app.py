"""A Setpoint reconciler written in Python: Greeting (demo.setpoint.dev/v1).

spec.name -> status.message = "Hello, NAME" and status.observedGeneration.
With spec.salutationUrl, the salutation is read from that URL instead (an
observed request: the host performs the GET, under the operator's
PluginGrant, and calls again with the answer).
Built into a WebAssembly component with componentize-py; see README.md.
"""

import json

# The CRD, embedded by build.sh from crds/greeting.json: imported here, at
# build time (componentize-py pre-initialises the module), so the component
# reads no file at run time.
from crd_json import CRD

import wit_world
from wit_world.imports import host
from wit_world.imports.types import (
    HttpRequest,
    KindRef,
    Manifest,
    ReconcileError_Permanent,
    ReconcileError_Transient,
    Response,
)
from componentize_py_types import Err, Ok

# The id the answer to the salutation read comes back under.
SALUTATION = "salutation"

class WitWorld(wit_world.WitWorld):
    def manifest(self) -> Manifest:
        return Manifest(
            name="python-greeting",
            version="0.1.0",
            reconciles=KindRef(api_version="demo.setpoint.dev/v1", kind="Greeting"),
            owns=[],
            definitions=[CRD],
            finalizer=None,
            # Any HTTP destination may be named by an object; the operator's
            # PluginGrant decides which ones the plugin really reaches.
            destinations=["http://*:*", "https://*:*"],
            secrets=[],
        )

    def reconcile(self, req) -> Response:
        obj = json.loads(req.object)
        spec = obj.get("spec") or {}
        name = spec.get("name")
        if not isinstance(name, str) or not name:
            raise Err(ReconcileError_Permanent("spec.name must be a non-empty string"))
        salutation = "Hello"
        url = spec.get("salutationUrl")
        if url:
            answer = next((o.answer for o in req.observations if o.id == SALUTATION), None)
            if answer is None:
                # Not read yet: ask the host to read it; it calls again with
                # the answer in req.observations.
                read = HttpRequest(
                    id=SALUTATION, method="GET", url=url, headers=[], body=None,
                    secrets=[], timeout_ms=None,
                )
                return Response(
                    children=None, status=None, events=[], requeue_after_ms=None,
                    remove_finalizer=False, observe=[read], effects=[],
                )
            if isinstance(answer, Ok) and 200 <= answer.value.status < 300:
                salutation = bytes(answer.value.body).decode("utf-8", "replace").strip()
            elif isinstance(answer, Ok):
                raise Err(ReconcileError_Transient(f"GET {url}: HTTP {answer.value.status}"))
            else:
                raise Err(ReconcileError_Transient(f"GET {url}: {answer.value.message}"))
        message = f"{salutation}, {name}"
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
