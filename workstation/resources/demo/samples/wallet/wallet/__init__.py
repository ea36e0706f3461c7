"""A bank account with deposits and withdrawals."""

from wallet.account import Account

__all__ = ["Account"]
