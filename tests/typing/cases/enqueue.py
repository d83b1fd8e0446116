# Checked by mypy only (tests/typing/test_types.py); never imported by pytest.
# Each line ending in an "E" marker comment must produce a mypy error containing its text;
# every other line must type-check.
from dataclasses import dataclass
from datetime import timedelta

from django_jobs import Job, JobHandle


@dataclass(frozen=True)
class SendEmailPayload:
    to: str


@dataclass(frozen=True)
class WrongPayload:
    to: str


class SendEmail(Job[SendEmailPayload]):
    def run(self, payload: SendEmailPayload) -> None:
        print(payload.to.upper(), self.context.attempt)


handle: JobHandle = SendEmail.enqueue(SendEmailPayload(to="a@example.com"), delay=timedelta(1))
SendEmail.enqueue_many([SendEmailPayload(to="b@example.com")])
SendEmail.enqueue(WrongPayload(to="a@example.com"))  # E: incompatible type "WrongPayload"
SendEmail.enqueue(SendEmailPayload(too="a@example.com"))  # E: Unexpected keyword argument "too"
SendEmail.enqueue(SendEmailPayload(to="a"), queue=3)  # E: incompatible type "int"
SendEmail.enqueue_many([WrongPayload(to="b")])  # E: List item 0 has incompatible type
