"""One Pulumi ComponentResource per module; `platform.InferencePlatform` composes them."""
