"""The statistics layer of rig: load scored runs, compare arms, and plan experiments by power.

pandas, scipy and statsmodels are imported here and only here (never by rig.cli at import time),
so the rest of the rig starts fast and works without them.
"""

from rig.analysis.load import COLUMNS, INFRA_COLUMNS, PoolingError, infra_summary, load_runs
from rig.analysis.power import power_cost, power_success, reps_for_power, reps_for_power_cost
from rig.analysis.stats import (
    CELL_COLUMNS,
    CMH_TEST,
    ESTIMANDS,
    EXACT_TEST,
    METRICS,
    TASKS_AS_SAMPLED,
    THESE_TASKS,
    WILCOXON_TEST,
    Comparison,
    cell_table,
    compare_conditions,
    compare_metric,
    compare_success,
    holm,
    median_ratio_interval,
    newcombe_interval,
    paired_median_test,
    stratified_test,
    success_interval,
    usage_values,
    wilcoxon_min_p,
    wilson_interval,
)
from rig.store.migrate import DuplicateRunWarning, RecordSchemaError

__all__ = [
    "CELL_COLUMNS",
    "CMH_TEST",
    "COLUMNS",
    "ESTIMANDS",
    "EXACT_TEST",
    "INFRA_COLUMNS",
    "METRICS",
    "WILCOXON_TEST",
    "Comparison",
    "DuplicateRunWarning",
    "PoolingError",
    "RecordSchemaError",
    "TASKS_AS_SAMPLED",
    "THESE_TASKS",
    "cell_table",
    "compare_conditions",
    "compare_metric",
    "compare_success",
    "holm",
    "infra_summary",
    "load_runs",
    "median_ratio_interval",
    "newcombe_interval",
    "paired_median_test",
    "power_cost",
    "power_success",
    "reps_for_power",
    "reps_for_power_cost",
    "stratified_test",
    "success_interval",
    "usage_values",
    "wilcoxon_min_p",
    "wilson_interval",
]
