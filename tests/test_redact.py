"""Redaction: secrets out, ordinary code and command output untouched."""

import base64
import random

import pytest

from drivetrain.control.redact import (
    MARK,
    MAYBE_SECRET,
    NOT_SECRET,
    SECRET,
    env_secrets,
    redact,
    secrecy,
)

# (text, the secret that must disappear, what it must become)
SECRETS = [
    (
        "export ANTHROPIC_API_KEY=sk-ant-api03-AbCdEfGhIjKlMnOpQrStUvWxYz0123456789_-abcdEFGH",
        "AbCdEfGhIjKlMnOpQrStUvWxYz0123456789",
        "export ANTHROPIC_API_KEY=sk-ant-[REDACTED]",
    ),
    (
        "client = OpenAI(api_key='sk-proj-abcDEF1234567890ghijklmnopQRSTuvwx')",
        "abcDEF1234567890",
        "client = OpenAI(api_key='sk-proj-[REDACTED]')",
    ),
    ("sk-abcdefghijklmnopqrstuvwxyz0123456789ABCDEFGHIJKL", "abcdefghij", "sk-[REDACTED]"),
    (
        "remote: https://ghp_abcdefghijklmnopqrstuvwxyz0123456789@github.com",
        "ghp_abcdefghij",
        "remote: https://ghp_[REDACTED]@github.com",
    ),
    ("GH=gho_16C7e42F292c6912E7710c838347Ae178B4a", "16C7e42F292c", "GH=gho_[REDACTED]"),
    ("github_pat_11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyzABCDEFGHIJ", "11ABCDEFG", "github_pat_[REDACTED]"),
    ("hook xoxb-123456789012-1234567890123-AbCdEfGhIjKlMnOpQrStUvWx", "123456789012", "hook xoxb-[REDACTED]"),
    ("aws_access_key_id = AKIAIOSFODNN7EXAMPLE", "IOSFODNN7", "aws_access_key_id = AKIA[REDACTED]"),
    (
        "aws_secret_access_key = wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
        "wJalrXUtnFEMI",
        "aws_secret_access_key = [REDACTED]",
    ),
    ("maps AIzaSyA-1234567890abcdefghijklmnopqrstu", "SyA-1234567890", "maps AIza[REDACTED]"),
    (
        "cookie: eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP",
        "dozjgNryP4J3",
        "cookie: eyJ[REDACTED]",
    ),
    (
        "curl -H 'Authorization: Bearer abc123def456ghi789' https://api",
        "abc123def456",
        "curl -H 'Authorization: Bearer [REDACTED]' https://api",
    ),
    ("Authorization: Basic dXNlcjpwYXNzd29yZA==", "dXNlcjpwYXNzd29yZA", "Authorization: Basic [REDACTED]"),
    (
        "-----BEGIN RSA PRIVATE KEY-----\nMIIEpAIBAAKCAQEAx4f\nabcdef==\n-----END RSA PRIVATE KEY-----\nafter",
        "MIIEpAIBAAKCAQEAx4f",
        "-----BEGIN RSA PRIVATE KEY-----[REDACTED]-----END RSA PRIVATE KEY-----\nafter",
    ),
    (
        "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA\n[... 900 characters cut ...]",
        "b3BlbnNzaC1rZXktdjEAAAAA",
        "-----BEGIN OPENSSH PRIVATE KEY-----[REDACTED]",
    ),
    (
        "git clone https://deploy:hunter2pass@github.com/org/repo.git",
        "hunter2pass",
        "git clone https://deploy:[REDACTED]@github.com/org/repo.git",
    ),
    (
        "DATABASE_URL=postgres://admin:s3cr3t@db:5432/app",
        "s3cr3t",
        "DATABASE_URL=postgres://admin:[REDACTED]@db:5432/app",
    ),
    ("DB_PASSWORD=hunter2", "hunter2", "DB_PASSWORD=[REDACTED]"),
    ('{"api_token": "abc123xyz", "user": "me"}', "abc123xyz", '{"api_token": "[REDACTED]", "user": "me"}'),
    ("mysql --password s3cretpw -u root", "s3cretpw", "mysql --password [REDACTED] -u root"),
    ("tool --client-secret=abcd1234efgh", "abcd1234efgh", "tool --client-secret=[REDACTED]"),
    ("smtp:\n  password: correcthorsebattery\n  port: 25", "correcthorse", "smtp:\n  password: [REDACTED]\n  port: 25"),
    ("curl -u alice:wonderland42 https://x", "wonderland42", "curl -u alice:[REDACTED] https://x"),
    ("X-Api-Key: 0123abcd4567", "0123abcd4567", "X-Api-Key: [REDACTED]"),
    ("STRIPE_KEY=rk_live_51Habc9876543210xyz", "51Habc98765", "STRIPE_KEY=[REDACTED]"),
    ("settings.auth_token = 'tok_8f3a9b2c'", "8f3a9b2c", "settings.auth_token = '[REDACTED]'"),
]


@pytest.mark.parametrize("text,secret,expected", SECRETS)
def test_secrets_are_caught(text, secret, expected):
    out = redact(text)
    assert secret not in out
    assert out == expected


# Ordinary code and command output that mentions tokens, keys and passwords without holding any.
ORDINARY = [
    (
        "from transformers import AutoTokenizer\ntokenizer = AutoTokenizer.from_pretrained('bert-base-uncased')\n"
        "tokens = tokenizer(text)['input_ids']"
    ),
    "def keyboard_handler(event):\n    key = event.key\n    if key == 'Enter':\n        return submit()",
    "pip install scikit-learn  # aka sk-learn\nSuccessfully installed scikit-learn-1.4.2 threadpoolctl-3.5.0",
    "commit 3f2a9c1b8e7d6f5a4b3c2d1e0f9a8b7c6d5e4f3a\nAuthor: Jane Doe <jane@example.com>\n\n    Fix tokenizer edge case",
    "sorted(items, key=lambda kv: kv[1])\nmax(xs, key=len)\nd = {k: v for k, v in pairs}",
    (
        "response = client.messages.create(model=model, max_tokens=1024, messages=messages)\n"
        "print(response.usage.input_tokens, response.usage.output_tokens)"
    ),
    '{"usage": {"input_tokens": 12, "output_tokens": 345, "cache_read_input_tokens": 0}, "stop_reason": "end_turn"}',
    "class User(Model):\n    id = Column(Integer, primary_key=True)\n    password_hash = Column(String(128))",
    (
        "def login(username: str, password: str, api_key: str | None = None, token: Optional[str] = None):\n"
        "    self.api_key = api_key\n    self.token = token\n    return Session(auth=auth)"
    ),
    "client = Anthropic(api_key=os.environ['ANTHROPIC_API_KEY'])\ntoken = get_token()\nsecret = vault.read(path)",
    (
        "export PATH=/usr/local/bin:$PATH\nexport API_KEY=$(cat ~/.secrets/key)\n"
        'curl -H "Authorization: Bearer $TOKEN" https://api.example.com'
    ),
    "docker login -u myuser --password-stdin registry.example.com < token.txt",
    "PWD=/home/user/project\nOLDPWD=/home/user\nHOME=/root\nSHELL=/bin/bash\nSSH_AUTH_SOCK=/tmp/ssh-XXXX/agent.123",
    "-rw-r--r--  1 user user  220 Jan  1 12:00 keys.py\n-rw-r--r--  1 user user 1024 Jan  1 12:00 token_test.py",
    (
        "tests/test_auth.py::test_token_refresh PASSED                     [  8%]\n"
        "========================= 1 failed, 11 passed in 0.52s ========================="
    ),
    (
        "    env:\n    - name: DB_PASSWORD\n      valueFrom:\n        secretKeyRef:\n          name: db-secret\n"
        "          key: password"
    ),
    (
        "    secrets: inherit\n    steps:\n      - run: echo ${{ secrets.GITHUB_TOKEN }}\n"
        "        env:\n          TOKEN: ${{ secrets.NPM_TOKEN }}"
    ),
    (
        "interface Config {\n  apiKey: string;\n  authToken?: string;\n  maxTokens: number;\n}\n"
        "const config: Config = { apiKey, authToken: process.env.TOKEN, maxTokens: 100 };"
    ),
    "auth_url = 'https://auth.example.com/oauth/token'\ntoken_type: bearer\nkey_id: 1234\ntoken_count = 42",
    "git@github.com:org/repo.git\nssh://git@example.com:22/repo\nhttps://example.com:8443/path?q=1",
    "sha256 e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
    "The tokenizer splits text into tokens; a bearer of bad news. Keys on the keyboard.",
    "uuid: 123e4567-e89b-12d3-a456-426614174000",
    "if (!token) throw new Error('missing token');\nconst headers = { Authorization: `Bearer ${token}` };",
    "sk-learn sk-1 sk-ant my-sk-thing task-queue-worker-process-number-one",
    "usage: tool [-h] [--token TOKEN] [--api-key API_KEY] [--password-file PATH]",
    "    token = jwt.decode(raw, key, algorithms=['HS256'])\nKeyError: 'exp'",
    'SPAN_KEY = "current-span"\nENV_API_KEY = "ANTHROPIC_API_KEY"\ncache_key = f\'{user}:{page}\'',
    "def f(auth: AuthTypes | None = None, api_keys: APIKeys = ()) -> None: ...",
    'Token.Number: "#976806"\ntoken.tag = "strong"\n"passwd:shell"',
    "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIEXAMPLEPUBLICKEYONLYxxxxxxxxxxxxxxxxx me@example.com",
]


@pytest.mark.parametrize("text", ORDINARY)
def test_ordinary_text_is_untouched(text):
    assert isinstance(text, str)
    assert redact(text) == text


def test_base64_image_data_is_untouched():
    data = base64.b64encode(random.Random(7).randbytes(60_000)).decode()
    block = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": data}}
    assert redact(block) == block


def test_environment_secret_values_are_caught_anywhere(monkeypatch):
    monkeypatch.setenv("MY_SERVICE_TOKEN", "q9Zt-77xw-secretvalue")
    monkeypatch.setenv("ANTHROPIC_AUTH_TOKEN", "plainlookingbutsecret42")
    monkeypatch.setenv("FEATURE_KEY_MODE", "disabled")  # a plain word: not treated as a secret
    env_out = "MY_SERVICE_TOKEN=q9Zt-77xw-secretvalue\nvalue is q9Zt-77xw-secretvalue\nplainlookingbutsecret42"
    out = redact({"stdout": env_out, "note": "feature is disabled"})
    assert "q9Zt" not in out["stdout"] and "plainlooking" not in out["stdout"]
    assert out["stdout"] == f"MY_SERVICE_TOKEN={MARK}\nvalue is {MARK}\n{MARK}"
    assert out["note"] == "feature is disabled"


def test_env_secrets_picks_names_and_values():
    env = {
        "ANTHROPIC_API_KEY": "sk-ant-xyz-123456",
        "OPENAI_API_KEY": "short",
        "HOME": "/root",
        "GITHUB_TOKEN": "ghp_abcdefgh12345",
        "DB_PASSWORD": "/run/secrets/db",
        "EDITOR": "vim-like-12345",
    }
    assert sorted(env_secrets(env)) == ["ghp_abcdefgh12345", "sk-ant-xyz-123456"]


def test_extra_secrets():
    assert redact("the code is 7f3kq9zz!", extra_secrets=["7f3kq9zz!", "ab"]) == f"the code is {MARK}"


def test_dict_values_under_secret_keys_are_redacted_whole():
    value = {
        "api_key": "anything at all",
        "Authorization": "Bearer x",
        "credentials": {"user": "u", "pw": "p"},
        "password": "",
        "token_count": 3,
        "max_tokens": 5,
        "auth": None,
        "stripe_key": "plain",
        "cache_key": "k1234567890abc",
        "nested": [{"client_secret": "zz"}],
        "tokenizer": "bpe",
    }
    assert redact(value) == {
        "api_key": MARK,
        "Authorization": MARK,
        "credentials": MARK,
        "password": "",
        "token_count": 3,
        "max_tokens": 5,
        "auth": None,
        "stripe_key": "plain",
        "cache_key": "k1234567890abc",
        "nested": [{"client_secret": MARK}],
        "tokenizer": "bpe",
    }


def test_structure_is_copied_not_changed():
    original = {"input": {"command": "echo DB_PASSWORD=hunter22"}, "list": ("a", ["b"]), "n": 1.5}
    out = redact(original)
    assert out == {"input": {"command": f"echo DB_PASSWORD={MARK}"}, "list": ("a", ["b"]), "n": 1.5}
    assert original["input"]["command"] == "echo DB_PASSWORD=hunter22"


@pytest.mark.parametrize("text,_s,_e", SECRETS)
def test_idempotent(text, _s, _e):
    once = redact(text)
    assert redact(once) == once


@pytest.mark.parametrize(
    "name,level",
    [
        ("api_key", SECRET),
        ("ANTHROPIC_API_KEY", SECRET),
        ("apiKey", SECRET),
        ("DB_PASSWORD", SECRET),
        ("client_secret", SECRET),
        ("x-auth-token", SECRET),
        ("stripe_key", MAYBE_SECRET),
        ("key", NOT_SECRET),
        ("tokenizer", NOT_SECRET),
        ("keyboard", NOT_SECRET),
        ("max_tokens", NOT_SECRET),
        ("primary_key", NOT_SECRET),
        ("auth_url", NOT_SECRET),
        ("token_count", NOT_SECRET),
        ("PWD", NOT_SECRET),
    ],
)
def test_secrecy_of_names(name, level):
    assert secrecy(name) == level
