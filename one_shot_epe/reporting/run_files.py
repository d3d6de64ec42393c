"""The result files a run ends with, one writer for every engine and audit.

`write_results` writes, into a run directory and under the names of its
layout (`runtime.run_directory`), each file atomically:

  final_cosines.csv     column `cosine` (seen), and `unseen` where the run
                        has unseen canaries: Algorithm 2's cosines
  max_cosines.csv       columns `seen`, `unseen` (only with unseen
                        canaries): Algorithm 3's max-over-rounds cosines
  data_canary_losses.csv  columns `seen`, `unseen` (with data canaries):
                        each data canary's loss under the final model
  data_canary_drops.csv columns `seen_drop`, `unseen_drop` (with data
                        canaries scored every round): each one's largest
                        excess one-round loss drop
  report.json/.md       the privacy report (`run_report.RunReport.write`)
  cosine_densities.png  the cosine sets against the null N(0, 1/d)
                        (`plots.plot_cosine_densities`)

Under --canary_kind=data the gradient canaries are tracked but never
inserted: their cosine files and plot would describe canaries the run did
not audit with, so only the losses, their drops and the report are
written.

The launcher (`experiments.run_outputs`), the TFF and Flower `CanaryAudit`s
and the CANIFE comparison (`experiments.canife_runs`) all write here.
"""

import os

from one_shot_epe.design import canary_spec
from one_shot_epe.reporting import plots
from one_shot_epe.reporting import run_report
from one_shot_epe.runtime import atomic_io
from one_shot_epe.runtime import run_directory

__all__ = ['write_results']


def write_results(run_dir: str, outcome: canary_spec.CanaryOutcome,
                  report: run_report.RunReport, *, title: str) -> None:
  """Writes the cosine CSVs, the report and the density plot of a run.

  Args:
    run_dir: The run directory (it must exist).
    outcome: What the run measured; its unseen canaries' cosines (empty:
      none) add the `unseen` column, max_cosines.csv and the plot's
      max-over-rounds panel.
    report: The run's report, written as report.json and report.md.
    title: The density plot's title.

  Raises:
    OSError: a file cannot be written; it keeps its old content.
  """
  if outcome.data_seen_losses is not None:
    atomic_io.write_columns_csv(
        os.path.join(run_dir, run_directory.DATA_CANARY_LOSSES_FILE),
        {'seen': outcome.data_seen_losses,
         'unseen': outcome.data_unseen_losses})
  if outcome.data_seen_drops is not None:
    atomic_io.write_columns_csv(
        os.path.join(run_dir, run_directory.DATA_CANARY_DROPS_FILE),
        {'seen_drop': outcome.data_seen_drops,
         'unseen_drop': outcome.data_unseen_drops})
  if report.canary_kind == 'data':
    report.write(os.path.join(run_dir, run_directory.REPORT_JSON_FILE),
                 os.path.join(run_dir, run_directory.REPORT_MARKDOWN_FILE))
    return
  columns = {'cosine': outcome.final_cosines}
  if outcome.final_unseen_cosines.size:
    columns['unseen'] = outcome.final_unseen_cosines
  atomic_io.write_columns_csv(
      os.path.join(run_dir, run_directory.FINAL_COSINES_FILE), columns)
  panels = {'final model': {'seen canaries': outcome.final_cosines}}
  if outcome.unseen_maxima.size:
    atomic_io.write_columns_csv(
        os.path.join(run_dir, run_directory.MAX_COSINES_FILE),
        {'seen': outcome.seen_maxima, 'unseen': outcome.unseen_maxima})
    panels['max over rounds'] = {'seen canaries': outcome.seen_maxima,
                                 'unseen canaries': outcome.unseen_maxima}
  report.write(os.path.join(run_dir, run_directory.REPORT_JSON_FILE),
               os.path.join(run_dir, run_directory.REPORT_MARKDOWN_FILE))
  plots.plot_cosine_densities(
      panels, outcome.dim,
      os.path.join(run_dir, run_directory.DENSITY_PLOT_FILE), title=title)
