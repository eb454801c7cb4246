"""The secret sanitiser on a corpus of real-looking secrets (none may survive) and of ordinary
prose and code (nothing may change)."""

from __future__ import annotations

import pytest

from cerememory import CMPError
from cerememory.config import load_config
from cerememory.security.sanitize import REDACTED, Sanitizer, parse_patterns, sanitize

JWT = ("eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIiwibmFtZSI6IkpvaG4gRG9lIiwiaWF0Ijox"
       "NTE2MjM5MDIyfQ.SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c")
PEM_BODY = ("MIIEpAIBAAKCAQEA3Tz2mr7SZiAMfQyuvBjM9Oi4Zh2dKq8bJZzK1yrOq2pD\n"
            "kTq4R0b3pZc9w8VlXh7Ug6c2JmQd1eYyq0XbN4Y9u1hF6q3sY2KQ7b8cP1Lm\n")

# (text, the secret that must disappear)
SECRETS = [
    ("export OPENAI_API_KEY=sk-proj-Ab3dEf6hIj9kLm2nOp5qRs8tUv1wXy4z", "sk-proj-Ab3dEf6hIj9kLm2nOp5qRs8tUv1wXy4z"),
    ("client = OpenAI(api_key='sk-Xq9mT2vB7nK4pL8wR3zY6cF1hJ5dG0sA')", "sk-Xq9mT2vB7nK4pL8wR3zY6cF1hJ5dG0sA"),
    ("ANTHROPIC_API_KEY=sk-ant-api03-kP9xW2mQ7vR4tY8zB3nC6fH1jL5dS0gA-Zx_9QwErTyUiOp",
     "sk-ant-api03-kP9xW2mQ7vR4tY8zB3nC6fH1jL5dS0gA-Zx_9QwErTyUiOp"),
    ("[default]\naws_access_key_id = AKIAZ7Q2X4M9P3L8K5TN\n", "AKIAZ7Q2X4M9P3L8K5TN"),
    ("aws_secret_access_key = q8Zk3mW7vT2pX9rB4nY6cJ1hF5dS0gL3aE8uQ2wK", "q8Zk3mW7vT2pX9rB4nY6cJ1hF5dS0gL3aE8uQ2wK"),
    ("STS creds ASIAY3K8N2P7Q4M9T6XW expire soon", "ASIAY3K8N2P7Q4M9T6XW"),
    ("git clone https://ghp_R8kT3mQ9xW2vB7nP4zY6cL1hF5dJ0sA8gE2u@github.com/acme/app.git",
     "ghp_R8kT3mQ9xW2vB7nP4zY6cL1hF5dJ0sA8gE2u"),
    ("GH_TOKEN=github_pat_11ABCDEFG0aBcDeFgHiJkL_mNoPqRsTuVwXyZ0123456789abcdefghijklmnopqrstuv",
     "github_pat_11ABCDEFG0aBcDeFgHiJkL_mNoPqRsTuVwXyZ0123456789abcdefghijklmnopqrstuv"),
    ("token: gho_Q7wE4rT1yU8iO5pA2sD9fG6hJ3kL0zX7cV4b", "gho_Q7wE4rT1yU8iO5pA2sD9fG6hJ3kL0zX7cV4b"),
    ("SLACK_BOT_TOKEN=xoxb-2048193745-5839201746382-Qw8Er7Ty6Ui5Op4As3Df2Gh1",
     "xoxb-2048193745-5839201746382-Qw8Er7Ty6Ui5Op4As3Df2Gh1"),
    ("posting to https://hooks.slack.com/services/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",
     "T0A1B2C3D/B4E5F6G7H/Xy9Zw8Vu7Ts6Rq5Po4Nm3Lk2"),
    ("maps key AIzaSyB3kT9mQ2xW7vR4pN8zY6cL1hF5dJ0sA8g in the request", "AIzaSyB3kT9mQ2xW7vR4pN8zY6cL1hF5dJ0sA8g"),
    (f"Authorization: Bearer {JWT}", JWT),
    (f"set-cookie: session={JWT}; HttpOnly", JWT),
    ("curl -H 'Authorization: Bearer 7f3a9c2e1b8d4f6a0c5e9b2d7a1f4c8e' https://api.example.com",
     "7f3a9c2e1b8d4f6a0c5e9b2d7a1f4c8e"),
    ("Authorization: Basic YWxhZGRpbjpvcGVuc2VzYW1l", "YWxhZGRpbjpvcGVuc2VzYW1l"),
    (f"-----BEGIN RSA PRIVATE KEY-----\n{PEM_BODY}-----END RSA PRIVATE KEY-----",
     "MIIEpAIBAAKCAQEA3Tz2mr7SZiAMfQyuvBjM9"),
    (f"-----BEGIN OPENSSH PRIVATE KEY-----\n{PEM_BODY}-----END OPENSSH PRIVATE KEY-----", "kTq4R0b3pZc9w8VlXh7Ug6c2"),
    ('{"type": "service_account", "private_key": "-----BEGIN PRIVATE KEY-----\\nMIIEvQIBADANBgkqhkiG9w0BAQEFAAS'
     'CBKcwggSjAgEAAoIBAQC7\\n-----END PRIVATE KEY-----\\n"}', "MIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQC7"),
    (f"-----BEGIN EC PRIVATE KEY-----\n{PEM_BODY}(log truncated)", "kTq4R0b3pZc9w8VlXh7Ug6c2"),
    ("DB_PASSWORD=Tr0ub4dor&3", "Tr0ub4dor"),
    ('password = "correct horse battery staple"', "correct horse battery staple"),
    ('{"username": "admin", "password": "P@ssw0rd!2024"}', "P@ssw0rd!2024"),
    ("mysql -u root --password=hunter2hunter2 shop", "hunter2hunter2"),
    ("database_url: postgres://app:s3cr3t-Passw0rd@db.internal:5432/app", "s3cr3t-Passw0rd"),
    ("REDIS_URL=redis://default:Zx81mQ0pLw@cache:6379/0", "Zx81mQ0pLw"),
    ("client_secret: 'GOCSPX-9kT3mQ2xW7vR4pN8zY6cL1hF'", "GOCSPX-9kT3mQ2xW7vR4pN8zY6cL1hF"),
    ("STRIPE_SECRET_KEY=sk_live_51H8kT3mQ2xW7vR4pN8zY6cL1hF5dJ0sA", "sk_live_51H8kT3mQ2xW7vR4pN8zY6cL1hF5dJ0sA"),
    ("//registry.npmjs.org/:_authToken=npm_R8kT3mQ9xW2vB7nP4zY6cL1hF5dJ0sA8gE2u",
     "npm_R8kT3mQ9xW2vB7nP4zY6cL1hF5dJ0sA8gE2u"),
    ("HF_TOKEN=hf_kT3mQ2xW7vR4pN8zY6cL1hF5dJ0sA8gEq", "hf_kT3mQ2xW7vR4pN8zY6cL1hF5dJ0sA8gEq"),
    ("x-api-key: 4f9a2c7e1b8d3f6a0c5e9b2d7a1f4c8e", "4f9a2c7e1b8d3f6a0c5e9b2d7a1f4c8e"),
    ("access_token=ya29.a0AfH6SMBx3kT9mQ2xW7vR4pN8zY6cL1hF5dJ0sA", "ya29.a0AfH6SMBx3kT9mQ2xW7vR4pN8zY6cL1hF5dJ0sA"),
    ("glpat-Xy9Zw8Vu7Ts6Rq5Po4Nm is the deploy token", "glpat-Xy9Zw8Vu7Ts6Rq5Po4Nm"),
    ("SENDGRID_API_KEY=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",
     "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"),
    ("the canary token=cnry7Q2xW7vR4pN8zY6cL1 leaked", "cnry7Q2xW7vR4pN8zY6cL1"),
]

CLEAN = [
    "The Bearer of bad news arrived late, and the meeting ran over by an hour.",
    "We rotated the password policy: passwords now need twelve characters.",
    "Reset your password from the settings page; the token expires after an hour.",
    "Tokenization splits the text into tokens; max_tokens=4096 and temperature=0.2 worked best.",
    "commit 3f786850e387550fdab836ed7e6dc881de23001b fixed the flaky test",
    "sha256: 9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
    "record 0190a4b2-7c1e-7d3a-9f00-123456789abc was consolidated into 0190a4b2-7c1e-7d3a-9f00-abcdefabcdef",
    "def login(user, password):\n    return check(user=user, password=password)\n",
    "password = self.password\npassword = os.environ['DB_PASSWORD']\npassword = settings.db.password\n",
    'api_key = os.getenv("OPENAI_API_KEY")\ntoken = request.headers.get("authorization")\n',
    "export DB_PASSWORD=$DB_PASSWORD_FROM_VAULT",
    'password: "{{ vault_db_password }}"',
    "secret: true\nsecret_santa: enabled",
    "The task-scheduler-with-a-very-long-name restarted at 09:00.",
    "Use the ask-for-confirmation-every-single-time flag in risky environments.",
    "Read https://docs.example.com/guide#passwords for the rules; see RFC 7519 for JWTs.",
    "git log --oneline | head; python -m pytest tests/test_auth.py -q",
    "She said the secret: keep commits small.",
    "SELECT id, password_hash FROM users WHERE email = %s",
    "for token in tokens:\n    counts[token] += 1\n",
    "The AKIA prefix marks long-term AWS keys; ASIA marks temporary ones.",
    "base64 of hello world is aGVsbG8gd29ybGQ= and that is fine",
    "https://user@example.com/path and ssh://git@github.com/acme/app.git",
    "const headers = { Authorization: `Bearer ${token}` };",
]


@pytest.mark.parametrize("text,secret", SECRETS, ids=[f"secret{i}" for i in range(len(SECRETS))])
def test_secrets_are_redacted(text, secret):
    cleaned, count = sanitize(text)
    assert secret not in cleaned and count >= 1 and REDACTED in cleaned


def test_zero_leaks_on_the_whole_corpus():
    corpus = "\n".join(text for text, _ in SECRETS)
    cleaned, count = sanitize(corpus)
    assert [s for _, s in SECRETS if s in cleaned] == []
    assert count >= len(SECRETS)


@pytest.mark.parametrize("text", CLEAN, ids=[f"clean{i}" for i in range(len(CLEAN))])
def test_ordinary_prose_and_code_is_untouched(text):
    assert sanitize(text) == (text, 0)


def test_key_names_stay_readable():
    assert sanitize("DB_PASSWORD=Tr0ub4dor&3")[0] == "DB_PASSWORD=[REDACTED]&3"
    assert sanitize("Authorization: Bearer 7f3a9c2e1b8d4f6a0c5e9b2d7a1f4c8e")[0] == "Authorization: Bearer [REDACTED]"
    assert sanitize("postgres://app:pw123456@db/app")[0] == "postgres://app:[REDACTED]@db/app"


def test_extra_patterns_from_the_config(tmp_path):
    config_file = tmp_path / "c.toml"
    config_file.write_text('[sanitize]\nextra_patterns = ["ACME-[0-9]{6}", "internal-ticket-\\\\d+"]\n')
    patterns = load_config(config_file)["sanitize.extra_patterns"]
    assert patterns == ("ACME-[0-9]{6}", "internal-ticket-\\d+")
    assert Sanitizer(patterns).sanitize("id acme-123456 and Internal-Ticket-42") == ("id [REDACTED] and [REDACTED]", 2)
    env = load_config(None, environ={"CEREMEMORY_SANITIZE__EXTRA_PATTERNS": '["zz[0-9]+"]'})
    assert env["sanitize.extra_patterns"] == ("zz[0-9]+",)


@pytest.mark.parametrize("bad", ["(a+)+$", "[unclosed", "x" * 300])
def test_dangerous_or_broken_extra_patterns_are_refused(bad):
    with pytest.raises(ValueError):
        parse_patterns([bad])
    with pytest.raises(CMPError) as err:
        load_config(None, environ={"CEREMEMORY_SANITIZE__EXTRA_PATTERNS": f'["{bad}"]'})
    assert "sanitize.extra_patterns" in err.value.message
