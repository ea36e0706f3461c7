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


def test_transfer():
    ada, bob = Account("ada", 1000), Account("bob")
    ada.transfer(bob, 300)
    assert (ada.balance_cents, bob.balance_cents) == (700, 300)


def test_str_shows_euros():
    assert str(Account("ada", 1250)) == "ada: 12.50 EUR"
