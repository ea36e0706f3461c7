import pytest

from wallet import Account


def test_deposit_and_withdraw():
    account = Account("ada", 1000)
    account.deposit(500)
    account.withdraw(300)
    assert account.balance_cents == 1200


def test_no_overdraft():
    account = Account("ada", 100)
    with pytest.raises(ValueError):
        account.withdraw(101)
    assert account.balance_cents == 100


def test_positive_amounts_only():
    with pytest.raises(ValueError):
        Account("ada").deposit(0)
