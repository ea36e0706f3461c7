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
        if amount_cents > self.balance_cents:
            raise ValueError("insufficient funds")
        self.balance_cents -= amount_cents

    def transfer(self, other, amount_cents):
        """Move money to `other`; changes neither account when it would overdraw."""
        self.withdraw(amount_cents)
        other.deposit(amount_cents)

    def __str__(self):
        return f"{self.owner}: {self.balance_cents / 100:.2f} EUR"
