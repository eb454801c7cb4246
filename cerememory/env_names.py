"""The environment variable of a setting: `CEREMEMORY_` + its name upper-cased, dots as `__`,
except the few with a shorter name. A leaf module, so that code below the config (an archive
reader naming the setting that would accept a costlier archive) can say it too."""

from __future__ import annotations

# settings whose environment variable is shorter than the derived name
SHORT_NAMES = {"data_dir": "CEREMEMORY_DATA_DIR", "encryption.passphrase": "CEREMEMORY_PASSPHRASE",
               "encryption.passphrase_file": "CEREMEMORY_PASSPHRASE_FILE", "auth.api_keys": "CEREMEMORY_API_KEYS"}


def env_name(setting: str) -> str:
    return SHORT_NAMES.get(setting) or "CEREMEMORY_" + setting.upper().replace(".", "__")
