"""MIG profiles each GPU model offers (the pack's own copy: it is published on its own)."""

MIG_PROFILES = {
    "H100-80GB": {"1g.10gb", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"},
    "A100-80GB": {"1g.10gb", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"},
    "A100-40GB": {"1g.5gb", "1g.10gb", "2g.10gb", "3g.20gb", "4g.20gb", "7g.40gb"},
    "H200-141GB": {"1g.18gb", "1g.35gb", "2g.35gb", "3g.71gb", "4g.71gb", "7g.141gb"},
}
