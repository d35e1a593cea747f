"""Epoch plans (every rank's batches of an epoch), their files, reports and plots."""

from batchsel.plans.plan import EpochPlan, load_plans, save_plans
from batchsel.plans.report import plan_report

__all__ = ["EpochPlan", "load_plans", "save_plans", "plan_report"]
