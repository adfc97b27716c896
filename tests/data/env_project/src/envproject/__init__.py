"""A project with a src layout: importable only once installed."""

from dateutil.relativedelta import relativedelta


def next_month_days(days: int) -> int:
    """The days of `days` plus one month's relativedelta, as a number the tests check."""
    return days + relativedelta(months=1).months
