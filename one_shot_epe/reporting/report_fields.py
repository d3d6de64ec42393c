"""One entry per field of a threat model's report: what it is, how shown.

A threat model's report (`privacy_report.PrivacyReport`) holds the facts of
its scores (counts, Gaussian fits) and then one field per entry of `FIELDS`:
the estimates, the lower bounds at 1 - alpha, the paper's nominal
bound, the attack's summaries and the Anderson-Darling statistics. Each
entry (`ReportField`) says once:

* its key (the report's attribute and JSON key) and its label (its column
  header in report.md and the grid's tables);
* its group, the table of report.md it appears in (`GROUPS`), and the
  threat models it is computed for ('final', 'all'; None elsewhere);
* what it assumes of the mechanism (`Family`: any (eps, delta)-DP mechanism,
  one Gaussian in the canary's direction, ...), from which every sentence
  of the reports says when a bound holds (`run_markdown`);
* how it is computed from the threat model's scores (a function of
  `report_scores.Scores`, which caches what several fields share: the
  Gaussian fits, the AUROC, the GDP mu);
* its value in reports written before it existed (`old_default`), whether
  `RunReport.to_dict` repeats it at the top level (`repeated`) and whether
  the terminal's summary table shows it (`short`, `summary`).

`PrivacyReport`'s fields and JSON, `RunReport`'s repeated keys, report.md's
estimate, bound and attack tables (`run_markdown`) and the grid's bound
columns (`experiments.grid_tables`) are all read from here, so a new field
is its statistic (in `one_shot_epe.stats`) and its entry here, whose
`compute` calls the statistic on the `Scores` (through its public name, its
`.unchecked` body: the report checked the scores once).
"""

import dataclasses
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from one_shot_epe.reporting import report_scores
from one_shot_epe.stats import estimation
from one_shot_epe.stats import gaussian_pair
from one_shot_epe.stats import one_run

__all__ = ['ANY_MECHANISM', 'ATTACK', 'Column', 'ESTIMATE', 'FAMILIES',
           'FIELDS', 'FIT', 'Family', 'GAUSSIAN', 'GROUPS', 'HEADLINE',
           'NOMINAL', 'REQUIRED', 'DATA_CANARY_GAUSSIAN', 'TIED_SCORES', 'ReportField', 'THREAT_MODELS', 'by_key',
           'details', 'in_groups', 'number_cell']

# The threat models: Algorithm 2 (final model) and Algorithm 3 (all iterates).
THREAT_MODELS = ('final', 'all')
# report.md's tables, in the order they appear.
GROUPS = ('estimates', 'lower bounds', 'nominal', 'attack', 'fit')
# The fields of the report's quotable sentence and main table, in their
# order there: the headline estimate, its interval and the headline bound
# for any mechanism. Every other estimate and bound goes to the table of
# details, with what it assumes (`details`).
HEADLINE = ('epsilon_est', 'epsilon_est_interval', 'epsilon_lo')


class _Required:
  """The `old_default` of a field every report has held."""

  def __repr__(self) -> str:
    return 'REQUIRED'


REQUIRED = _Required()


@dataclasses.dataclass(frozen=True)
class Family:
  """What a statistic assumes of the mechanism, in one line.

  Attributes:
    text: The assumption, e.g. 'any (ε, δ)-DP mechanism'.
    tag: Its mark after a column's label, e.g. 'Gaussian'; '' for none.
    bound: Whether its statistics are lower bounds at the report's
      confidence (where `assumption` holds).
    assumption: What must hold of the mechanism for its bounds to hold, a
      clause, e.g. "the mechanism is Gaussian in the canary's direction";
      '' for none.
    caveat: For a family with an assumption: what its failing can do, a
      clause (docs/bounds.md).
  """
  text: str
  tag: str = ''
  bound: bool = False
  assumption: str = ''
  caveat: str = ''

  @property
  def condition(self) -> str:
    """'if <assumption>', or '' for a family without one."""
    return f'if {self.assumption}' if self.assumption else ''

  @property
  def holds(self) -> str:
    """When its bounds hold, completing 'they hold ...'; '' for no bounds.

    'whatever the mechanism', or 'only if <assumption>'.
    """
    if not self.bound:
      return ''
    return (f'only if {self.assumption}' if self.assumption else
            'whatever the mechanism')


ANY_MECHANISM = Family('any (ε, δ)-DP mechanism', bound=True)
GAUSSIAN = Family(
    "Gaussian in the canary's direction", 'Gaussian', bound=True,
    assumption="the mechanism is Gaussian in the canary's direction",
    caveat='scores with tails a little heavier than a Gaussian\'s, which '
    'a normality test on 1,000 of them often passes, put them above the '
    'true ε in most runs (docs/bounds.md)')
NOMINAL = Family('nothing it can keep: its threshold is chosen on the data '
                 'it tests (nominal only)', 'nominal')
ESTIMATE = Family('Gaussian canary scores (an estimate, not a bound)')
ATTACK = Family('nothing: a summary of the attack (not a bound)')
FIT = Family("nothing: a test of the scores' normality")
# Why data canaries' reports lack the bounds of the GAUSSIAN family.
DATA_CANARY_GAUSSIAN = (
    "not reported for data canaries: a loss is no Gaussian mechanism's "
    "output in the canary's direction (the noise is added to the update, "
    'and the loss is a non-linear function of the whole model), so these '
    'bounds would assume what does not hold; the bounds for any mechanism '
    'apply')
# Why fit-based fields are n/a when a sample's scores all tie.
TIED_SCORES = ("a sample's scores all tie (zero spread: e.g. a model so "
               'noised that every canary has the same loss), so no Gaussian '
               'can be fit to it')
# Columns of one table appear in this order of their families (bounds for
# any mechanism before those that assume a Gaussian one), then in `FIELDS`'.
FAMILIES = (ANY_MECHANISM, GAUSSIAN, NOMINAL, ESTIMATE, ATTACK, FIT)


def number_cell(value: float | None) -> str:
  """A table cell: 4 significant digits, n/a for None, ∞ for infinity.

  Args:
    value: The number, or None for a statistic not computed.

  Returns:
    The cell's text.
  """
  if value is None:
    return 'n/a'
  return '∞' if math.isinf(value) else f'{value:.4g}'


@dataclasses.dataclass(frozen=True)
class Column:
  """One column a field shows in a Markdown table.

  Attributes:
    label: The header, without a threat model's suffix.
    tag: The field family's tag, shown after the label in parentheses.
    cell: The cell of a threat model's report (None: the run lacks that
      threat model, shown as n/a).
  """
  label: str
  tag: str
  cell: Callable[[Any], str]

  def header(self, suffix: str = '') -> str:
    """The column's header, e.g. 'ε_one-run-fdp-all (Gaussian)'.

    Args:
      suffix: Appended to the label, before the tag (e.g. '-all').

    Returns:
      The header text.
    """
    return f'{self.label}{suffix}' + (f' ({self.tag})' if self.tag else '')


# -- How each field is shown. -------------------------------------------------


def _read_interval(value: Sequence[float]) -> tuple[float, float]:
  interval = tuple(value)
  if len(interval) != 2:
    raise ValueError('epsilon_est_interval must have two elements; got '
                     f'{value!r}.')
  return interval


def _identity(value: Any) -> Any:
  return value


def _read_optional_rates(
    value: Mapping[str, float] | None) -> dict[str, float] | None:
  return None if value is None else dict(value)


def _no_reason(report: Any) -> None:
  del report  # A value, or None without a stated reason.


def _gauss_pair_missing(report: Any) -> str | None:
  """Why the final model has no Gaussian-pair bound: d below its minimum."""
  if report.threat_model != 'final' or (
      report.dim >= gaussian_pair.MIN_FINAL_DIM):
    return None
  return (f'd = {report.dim} is below {gaussian_pair.MIN_FINAL_DIM:,}, where '
          "the cosines' laws are too far from Gaussian for it "
          '(docs/bounds.md)')


def _number_columns(field: 'ReportField') -> tuple[Column, ...]:
  return (Column(field.label, field.assumes.tag, lambda report: number_cell(
      None if report is None else getattr(report, field.key))),)


def _estimate_columns(field: 'ReportField') -> tuple[Column, ...]:
  """The headline, '≥' in front when saturated (the most it can show)."""

  def cell(report: Any) -> str:
    if report is None:
      return 'n/a'
    mark = '≥' if report.epsilon_est_saturated else ''
    return mark + number_cell(getattr(report, field.key))

  return (Column(field.label, field.assumes.tag, cell),)


def _interval_columns(field: 'ReportField') -> tuple[Column, ...]:
  """[low, high]; none for a saturated estimate, which has no interval."""

  def cell(report: Any) -> str:
    if report is None:
      return 'n/a'
    if report.epsilon_est_saturated:
      return 'no interval (saturated)'
    low, high = getattr(report, field.key)
    return f'[{number_cell(low)}, {number_cell(high)}]'

  return (Column(field.label, field.assumes.tag, cell),)


def _text_columns(field: 'ReportField') -> tuple[Column, ...]:
  return (Column(field.label, field.assumes.tag, lambda report: (
      'n/a' if report is None else str(getattr(report, field.key)))),)


def _rate_columns(field: 'ReportField') -> tuple[Column, ...]:
  """One column per FPR, e.g. 'TPR at FPR 1e-2'."""

  def column(fpr: float) -> Column:
    mantissa, exponent = f'{fpr:.0e}'.split('e')

    def cell(report: Any) -> str:
      rates = None if report is None else getattr(report, field.key)
      return number_cell(
          None if rates is None else rates[report_scores.fpr_key(fpr)])

    return Column(f'{field.label} {mantissa}e{int(exponent)}',
                  field.assumes.tag, cell)

  return tuple(column(fpr) for fpr in report_scores.TPR_FPRS)


def _no_columns(field: 'ReportField') -> tuple[Column, ...]:
  del field  # Shown through another field's cell.
  return ()


_LAYOUTS: Mapping[str, Callable[['ReportField'], tuple[Column, ...]]] = {
    'number': _number_columns, 'estimate': _estimate_columns,
    'interval': _interval_columns, 'text': _text_columns,
    'rates': _rate_columns, 'none': _no_columns,
}


@dataclasses.dataclass(frozen=True)
class ReportField:
  """One field of a threat model's report.

  Attributes:
    key: The attribute of `PrivacyReport` and its JSON key.
    label: Its column header (report.md; the grid's tables add '-all' or
      '-final').
    group: report.md's table it appears in, one of `GROUPS`.
    threat_models: The threat models it is computed for; None elsewhere.
    assumes: What it assumes of the mechanism (`Family`).
    compute: Its value from the threat model's `report_scores.Scores`.
    kind: Its type (the dataclass field's annotation).
    old_default: Its value in reports written before it existed;
      `REQUIRED` where every report has held it.
    repeated: Whether `RunReport.to_dict` repeats it at the top level with
      the suffix _final or _all.
    layout: How a table shows it: 'number', 'estimate' (with '≥' when
      saturated), 'interval', 'text', 'rates' (a column per FPR) or 'none'.
    short: Its name in the terminal's summary table ('' where not shown).
    summary: The threat models whose summary cell shows it.
    read: Turns the value JSON gives back into the field's value.
    source: For a bound, how it is computed or whose it is, in a few words
      (the report's sentences on the bounds name it).
    missing: Why a threat model's report lacks its value (None), in a
      clause; None where no reason is given.
    needs_fit: Whether it needs Gaussian fits of both samples; None where
      a sample has no spread (data canaries' tied losses, `Scores.fits`).
  """
  key: str
  label: str
  group: str
  threat_models: tuple[str, ...]
  assumes: Family
  compute: Callable[[report_scores.Scores], Any]
  kind: Any = float
  old_default: Any = REQUIRED
  repeated: bool = True
  layout: str = 'number'
  short: str = ''
  summary: tuple[str, ...] = ()
  read: Callable[[Any], Any] = _identity
  source: str = ''
  missing: Callable[[Any], str | None] = _no_reason
  needs_fit: bool = False

  def __post_init__(self):
    if self.group not in GROUPS:
      raise ValueError(f'{self.key}: group must be one of {GROUPS}; got '
                       f'{self.group!r}.')
    if self.layout not in _LAYOUTS:
      raise ValueError(f'{self.key}: layout must be one of {sorted(_LAYOUTS)}; '
                       f'got {self.layout!r}.')
    if not set(self.summary) <= set(self.threat_models) or (
        bool(self.summary) != bool(self.short)):
      raise ValueError(f'{self.key}: a summary needs a short name and threat '
                       'models the field is computed for.')

  def columns(self) -> tuple[Column, ...]:
    """The columns a table shows the field in (none for 'none').

    Returns:
      The columns, in order.
    """
    return _LAYOUTS[self.layout](self)

  def value(self, scores: report_scores.Scores) -> Any:
    """The field's value for a threat model's scores.

    Args:
      scores: The threat model's scores.

    Returns:
      `compute(scores)`, or None for a threat model it is not computed for
      and for a bound that assumes a Gaussian mechanism on data canaries'
      loss scores (`DATA_CANARY_GAUSSIAN`).
    """
    if scores.threat_model not in self.threat_models or (
        scores.canary_kind == 'data' and self.assumes is GAUSSIAN) or (
            self.needs_fit and not scores.fits):
      return None
    return self.compute(scores)

  def why_missing(self, report: Any) -> str | None:
    """Why a threat model's report lacks the field's value, or None.

    Args:
      report: The threat model's `privacy_report.PrivacyReport`.

    Returns:
      `DATA_CANARY_GAUSSIAN` for a Gaussian-family bound of data canaries,
      else the entry's own reason (`missing`).
    """
    if report.canary_kind == 'data' and self.assumes is GAUSSIAN:
      return DATA_CANARY_GAUSSIAN
    if self.needs_fit and (report.seen_std == 0 or report.null_std == 0):
      return TIED_SCORES
    return self.missing(report)


_BOTH = THREAT_MODELS
_Scores = report_scores.Scores
# The fields, in the order of `PrivacyReport`'s attributes and JSON.
FIELDS = (
    ReportField('epsilon_est', 'ε_est', 'estimates', _BOTH, ESTIMATE,
                _Scores.epsilon_est, layout='estimate'),
    ReportField('epsilon_est_saturated', 'saturated', 'estimates', _BOTH,
                ESTIMATE, _Scores.saturated, kind=bool, repeated=False,
                layout='none'),
    ReportField('epsilon_est_interval',
                '95% bootstrap interval of the estimate', 'estimates', _BOTH,
                ESTIMATE, _Scores.interval, kind=tuple[float, float],
                layout='interval', read=_read_interval),
    ReportField('epsilon_est_method', 'how ε_est is computed', 'estimates',
                _BOTH, ESTIMATE, _Scores.method, kind=str, repeated=False,
                layout='text'),
    ReportField('epsilon_est_fitted', "paper's ε_est", 'estimates', _BOTH,
                ESTIMATE, _Scores.fitted, needs_fit=True),
    ReportField('epsilon_lo', 'ε_lo', 'lower bounds', _BOTH, ANY_MECHANISM,
                lambda scores: scores.lower_bound(scores.threshold_strategy),
                short='lo', summary=_BOTH,
                source='Clopper-Pearson, Bonferroni over a fixed family of '
                'thresholds'),
    ReportField('epsilon_lo_paper', "paper's ε_lo", 'nominal', _BOTH, NOMINAL,
                lambda scores: scores.lower_bound('paper')),
    ReportField('epsilon_one_run', 'ε_one-run', 'lower bounds', _BOTH,
                ANY_MECHANISM,
                lambda scores: scores.one_run(one_run.epsilon_one_run),
                kind=float | None, source='Steinke et al., 2023'),
    ReportField('epsilon_one_run_fdp', 'ε_one-run-fdp', 'lower bounds', _BOTH,
                GAUSSIAN,
                lambda scores: scores.one_run(one_run.epsilon_one_run_fdp),
                kind=float | None, source='Mahloujifar et al., 2024'),
    ReportField('anderson_seen', 'A² seen', 'fit', _BOTH, FIT,
                lambda scores: scores.anderson(scores.seen),
                kind=float | None, repeated=False, needs_fit=True),
    ReportField('anderson_unseen', 'A² unseen', 'fit', ('all',), FIT,
                lambda scores: scores.anderson(scores.unseen),
                kind=float | None, repeated=False, needs_fit=True),
    ReportField('epsilon_gdp', 'ε_gdp', 'attack', _BOTH, ATTACK,
                lambda scores: estimation.epsilon_of_gdp.unchecked(
                    scores.gdp_mu, scores.delta), needs_fit=True),
    ReportField('gdp_mu', 'GDP μ', 'attack', _BOTH, ATTACK,
                lambda scores: scores.gdp_mu, needs_fit=True),
    ReportField('auroc', 'AUROC', 'attack', _BOTH, ATTACK,
                lambda scores: scores.auroc),
    ReportField('tpr_at_fpr', 'TPR at FPR', 'attack', _BOTH, ATTACK,
                _Scores.tpr_at_fpr, kind=dict[str, float], layout='rates',
                read=dict),
    ReportField('epsilon_lo_tight_any', 'ε_tight-any', 'lower bounds', _BOTH,
                ANY_MECHANISM, _Scores.tight_any, kind=float | None,
                old_default=None, short='any', summary=('final',),
                source='Xiang et al., 2025, (ε, δ) channel: the final model '
                'against the exact null, all iterates by their game'),
    ReportField('epsilon_lo_tight_gdp', 'ε_tight-gdp', 'lower bounds', _BOTH,
                GAUSSIAN, lambda scores: scores.tight_game('gdp'),
                kind=float | None, old_default=None, short='gdp',
                summary=('final',),
                source='Xiang et al., 2025, μ-GDP, by their game'),
    ReportField('epsilon_lo_gauss_pair', 'ε_gauss-pair', 'lower bounds', _BOTH,
                GAUSSIAN, _Scores.gauss_pair, kind=float | None,
                old_default=None,
                source="the fitted Gaussian pair's mean shift",
                missing=_gauss_pair_missing),
    # jax-privacy main's ROC-hull statistics; they need unseen canaries.
    ReportField('epsilon_lo_gdp_thresholds', 'ε_gdp-thresholds',
                'lower bounds', _BOTH, GAUSSIAN, _Scores.gdp_thresholds,
                kind=float | None, old_default=None,
                source='μ-GDP from threshold tests, jax-privacy'),
    ReportField('tpr_at_given_fpr', 'hull TPR at FPR', 'attack', _BOTH,
                ATTACK, _Scores.tpr_at_given_fpr,
                kind=dict[str, float] | None, old_default=None,
                layout='rates', read=_read_optional_rates),
    ReportField('max_accuracy', 'max accuracy', 'attack', _BOTH, ATTACK,
                _Scores.max_accuracy, kind=float | None, old_default=None),
)


def by_key(key: str) -> ReportField:
  """The entry of `FIELDS` whose key is `key`.

  Args:
    key: A field's key, e.g. 'epsilon_lo'.

  Returns:
    Its entry.

  Raises:
    KeyError: if no entry has that key.
  """
  for field in FIELDS:
    if field.key == key:
      return field
  raise KeyError(key)


def in_groups(*groups: str) -> list[ReportField]:
  """The entries of `groups`, in the order a table shows them.

  Ordered by their families' place in `FAMILIES`, then as in `FIELDS`.

  Args:
    *groups: Names from `GROUPS`.

  Returns:
    The entries.

  Raises:
    ValueError: if a group is unknown.
  """
  for group in groups:
    if group not in GROUPS:
      raise ValueError(f'unknown group {group!r}; one of {GROUPS}.')
  chosen = [field for field in FIELDS if field.group in groups]
  return sorted(chosen, key=lambda field: FAMILIES.index(field.assumes))


def details(*groups: str) -> list[ReportField]:
  """The entries of `groups` but the `HEADLINE` ones, in `in_groups`' order.

  Args:
    *groups: Names from `GROUPS`.

  Returns:
    The entries the tables of details show.

  Raises:
    ValueError: if a group is unknown.
  """
  return [field for field in in_groups(*groups) if field.key not in HEADLINE]
