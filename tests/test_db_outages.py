"""Which failures are a dependency going away (503, retry) rather than a bug (500)."""

from __future__ import annotations

from asyncpg.exceptions import ConnectionDoesNotExistError, InterfaceError
from tortoise.exceptions import DBConnectionError, IntegrityError

from libflow.db.outages import dependency_down


def _raised_while_handling(handled: BaseException, raised: BaseException) -> BaseException:
    try:
        try:
            raise handled
        except BaseException:
            raise raised  # noqa: B904  (chained implicitly, as a failing rollback is)
    except BaseException as err:
        return err


def test_a_dropped_connection_is_a_dependency_down() -> None:
    assert dependency_down(ConnectionDoesNotExistError("connection was closed"))
    assert dependency_down(DBConnectionError("refused"))


def test_a_failing_rollback_after_a_dropped_connection_is_the_outage_too() -> None:
    # A transaction's rollback on the connection PostgreSQL closed raises InterfaceError.
    err = _raised_while_handling(
        DBConnectionError("connection was closed in the middle of operation"),
        InterfaceError("cannot call Transaction.rollback(): the underlying connection is closed"),
    )
    assert dependency_down(err)


def test_an_explicit_cause_is_followed() -> None:
    try:
        raise RuntimeError("could not record the run") from ConnectionRefusedError(111, "refused")
    except RuntimeError as err:
        assert dependency_down(err)


def test_another_error_raised_while_handling_an_outage_is_an_error_of_its_own() -> None:
    # A duplicate key written again after a batch lost its connection is not the outage.
    err = _raised_while_handling(DBConnectionError("refused"), IntegrityError("duplicate key"))
    assert not dependency_down(err)


def test_a_cleanup_error_that_suppresses_its_context_is_its_own() -> None:
    try:
        try:
            raise DBConnectionError("refused")
        except DBConnectionError:
            raise InterfaceError("connection is closed") from None
    except InterfaceError as err:
        assert not dependency_down(err)


def test_an_error_of_our_own_is_not_a_dependency_down() -> None:
    assert not dependency_down(InterfaceError("cannot perform operation: another operation"))
    assert not dependency_down(_raised_while_handling(KeyError("a"), ValueError("b")))


def test_an_exception_chained_to_itself_ends_the_walk() -> None:
    err = ValueError("loop")
    err.__context__ = err
    assert not dependency_down(err)
