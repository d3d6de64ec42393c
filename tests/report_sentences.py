"""Reads a report's text as sentences, to check what they claim of each bound.

`unconditional_claims` finds every sentence (or table row) that names a
lower bound of a family with an assumption (the Gaussian one of
`report_fields`) and calls it a bound or says it holds, without stating
that assumption. Sentences are the text's paragraphs (wrapped lines joined)
cut after a full stop; a table row is one sentence.
"""

import re

from one_shot_epe.reporting import report_fields

# The bounds of the Gaussian family as the project has them: the family of
# `report_fields` must still hold them (a test checks).
GAUSSIAN_BOUNDS = ('epsilon_one_run_fdp', 'epsilon_lo_tight_gdp',
                   'epsilon_lo_gauss_pair', 'epsilon_lo_gdp_thresholds')
_CLAIM = re.compile(r'\b(holds?|bounds?)\b')
_END = re.compile(r'(?<=\.)\s+(?=[A-Zε*(])')


def sentences(text: str) -> list[str]:
  """The text's sentences: table rows, and paragraphs cut after full stops.

  Args:
    text: Markdown.

  Returns:
    The sentences, in order.
  """
  found, paragraph = [], []
  for line in text.splitlines() + ['']:
    stripped = line.strip()
    if stripped.startswith('|') or not stripped:
      if paragraph:
        found += _END.split(' '.join(paragraph))
        paragraph = []
      if stripped:
        found.append(stripped)
    else:
      paragraph.append(stripped)
  return found


def _names(label: str) -> re.Pattern:
  """A label as a whole name: not part of a longer label (ε_one-run-fdp)."""
  return re.compile(r'(?<![\w-])' + re.escape(label) + r'(?![\w-])')


def conditional_fields() -> list[report_fields.ReportField]:
  """The lower bounds whose family has an assumption."""
  return [field for field in report_fields.in_groups('lower bounds')
          if field.assumes.assumption]


def unconditional_claims(text: str) -> list[str]:
  """Sentences that call such a bound a bound, or say it holds, bare.

  Args:
    text: Markdown of a report, a table or a program's output.

  Returns:
    Each sentence that names a bound of a family with an assumption and
    says 'hold(s)' or 'bound(s)' without that assumption's clause.
  """
  bare = []
  for sentence in sentences(text):
    if not _CLAIM.search(sentence):
      continue
    for field in conditional_fields():
      if _names(field.label).search(sentence) and (
          field.assumes.assumption not in sentence):
        bare.append(sentence)
        break
  return bare


def named_with_condition(text: str) -> set[str]:
  """The labels of such bounds that some sentence names with its clause.

  Args:
    text: As for `unconditional_claims`.

  Returns:
    The labels.
  """
  return {field.label for sentence in sentences(text)
          for field in conditional_fields()
          if _names(field.label).search(sentence) and
          field.assumes.assumption in sentence}
