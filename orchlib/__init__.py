"""orchlib."""

from orchlib.describe import DescribeResult, describe, describe_file

__all__ = ["describe", "describe_file", "DescribeResult"]
