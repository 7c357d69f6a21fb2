"""Kubeflow Trainer v2 TrainJob (`trainer.kubeflow.org/v1alpha1`, SPEC R13.2).

Trainer names a JobSet after the TrainJob, makes the TrainJob its controller, mirrors the
TrainJob's `spec.suspend` into it and copies the JobSet's Failed/Completed conditions
back (kubeflow/trainer pkg/runtime/framework/plugins/jobset/jobset.go, Build and Status).
So the JobSet speaks for it: the JobSet's records tell the TrainJob's failure and carry
its workers' status, its pods name the JobSet (`jobset.py`). Kueue's TrainJob integration
owns the Workload by the TrainJob. The TrainJob's own records join nothing.
"""

from __future__ import annotations

from typing import Final

from app.core.kinds.base import Api, WorkloadKind
from app.model.envelope import JOBS

TRAINJOB: Final = "TrainJob"  # kubeflow/trainer pkg/apis/trainer/v1alpha1/trainjob_types.go TrainJobKind
GROUP: Final = "trainer.kubeflow.org"  # kubeflow/trainer pkg/apis/trainer/v1alpha1/groupversion_info.go


class TrainJob(WorkloadKind):
    # kubeflow/trainer manifests/base/crds/trainer.kubeflow.org_trainjobs.yaml
    api = Api(TRAINJOB, GROUP, ("v1alpha1",), "trainjobs", JOBS)
    kueue = True  # its Workload names the TrainJob
    observed_by_gang = False  # its JobSet mirrors its suspension and reports its workers

    def records_attempt(self) -> bool:
        return False
