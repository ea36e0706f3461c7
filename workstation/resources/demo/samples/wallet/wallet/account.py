"""An account balance in integer cents."""


class Account:
    def __init__(self, owner, balance_cents=0):
        self.owner = owner
        self.balance_cents = balance_cents

    def deposit(self, amount_cents):
        if amount_cents <= 0:
            raise ValueError("deposit must be positive")
        self.balance_cents += amount_cents

    def withdraw(self, amount_cents):
        """Take money out; refuses (ValueError) to overdraw the account."""
        if amount_cents <= 0:
            raise ValueError("withdrawal must be positive")
        self.balance_cents -= amount_cents
