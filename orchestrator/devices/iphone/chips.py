"""Which chip is in a phone: product type (``iPhone17,1``) -> chip class (``A18 Pro``).

Sources: the chip of each model is from Apple's per-model tech specs (support.apple.com/specs);
the product-type identifiers and their chip ids (CPID) are those of pymobiledevice3's own device
table, ``pymobiledevice3.irecv_devices.IRECV_DEVICES`` (11.45), and a test checks this table
against it, so an identifier typed wrong, or a chip put in the wrong family, fails a test. Entries
marked ``# unverified`` were announced after the last model we could check against a spec page.

A product type not listed here falls back to the chip family its CPID names (``A19 family``),
which is enough to keep ceilings and tuning tables apart by silicon generation.
"""

from __future__ import annotations

CHIP_BY_PRODUCT_TYPE: dict[str, str] = {
    # iPhone
    "iPhone10,1": "A11 Bionic", "iPhone10,2": "A11 Bionic", "iPhone10,3": "A11 Bionic",
    "iPhone10,4": "A11 Bionic", "iPhone10,5": "A11 Bionic", "iPhone10,6": "A11 Bionic",
    "iPhone11,2": "A12 Bionic", "iPhone11,4": "A12 Bionic", "iPhone11,6": "A12 Bionic", "iPhone11,8": "A12 Bionic",
    "iPhone12,1": "A13 Bionic", "iPhone12,3": "A13 Bionic", "iPhone12,5": "A13 Bionic", "iPhone12,8": "A13 Bionic",
    "iPhone13,1": "A14 Bionic", "iPhone13,2": "A14 Bionic", "iPhone13,3": "A14 Bionic", "iPhone13,4": "A14 Bionic",
    "iPhone14,2": "A15 Bionic", "iPhone14,3": "A15 Bionic", "iPhone14,4": "A15 Bionic", "iPhone14,5": "A15 Bionic",
    "iPhone14,6": "A15 Bionic", "iPhone14,7": "A15 Bionic", "iPhone14,8": "A15 Bionic",
    "iPhone15,2": "A16 Bionic", "iPhone15,3": "A16 Bionic", "iPhone15,4": "A16 Bionic", "iPhone15,5": "A16 Bionic",
    "iPhone16,1": "A17 Pro", "iPhone16,2": "A17 Pro",
    "iPhone17,1": "A18 Pro", "iPhone17,2": "A18 Pro",
    "iPhone17,3": "A18", "iPhone17,4": "A18", "iPhone17,5": "A18",
    "iPhone18,1": "A19 Pro", "iPhone18,2": "A19 Pro", "iPhone18,4": "A19 Pro",
    "iPhone18,3": "A19",
    "iPhone18,5": "A19",  # unverified (iPhone 17e)
    # iPad with phone-class or M-series silicon
    "iPad16,1": "A17 Pro", "iPad16,2": "A17 Pro",
    "iPad13,4": "M1", "iPad13,5": "M1", "iPad13,6": "M1", "iPad13,7": "M1", "iPad13,8": "M1", "iPad13,9": "M1",
    "iPad13,10": "M1", "iPad13,11": "M1", "iPad13,16": "M1", "iPad13,17": "M1",
    "iPad14,3": "M2", "iPad14,4": "M2", "iPad14,5": "M2", "iPad14,6": "M2",
    "iPad14,8": "M2", "iPad14,9": "M2", "iPad14,10": "M2", "iPad14,11": "M2",
    "iPad15,3": "M3", "iPad15,4": "M3", "iPad15,5": "M3", "iPad15,6": "M3",
    "iPad16,3": "M4", "iPad16,4": "M4", "iPad16,5": "M4", "iPad16,6": "M4",
    "iPad17,1": "M5", "iPad17,2": "M5", "iPad17,3": "M5", "iPad17,4": "M5",
}

# CPID -> the chip family every product with that die shares (Pro and non-Pro bins share one CPID).
FAMILY_BY_CHIP_ID: dict[int, str] = {
    0x8015: "A11", 0x8020: "A12", 0x8030: "A13", 0x8101: "A14", 0x8103: "M1", 0x8110: "A15", 0x8112: "M2",
    0x8120: "A16", 0x8122: "M3", 0x8130: "A17", 0x8132: "M4", 0x8140: "A18", 0x8142: "M5", 0x8150: "A19",
}


def chip_class(product_type: str | None, chip_id: int | None = None) -> str | None:
    """The chip class for a product type, else its CPID's family (``A19 family``), else None."""
    if product_type in CHIP_BY_PRODUCT_TYPE:
        return CHIP_BY_PRODUCT_TYPE[product_type]
    if chip_id is None:
        chip_id = _irecv_chip_id(product_type)
    if chip_id is None:
        return None
    family = FAMILY_BY_CHIP_ID.get(chip_id)
    return f"{family} family" if family else f"T{chip_id:04X}"


def model_name(product_type: str | None) -> str:
    """Marketing name from pymobiledevice3's device table (``iPhone 16 Pro``), else the product type."""
    if not product_type:
        return "unknown iPhone"
    from pymobiledevice3.irecv_devices import IRECV_DEVICES

    for dev in IRECV_DEVICES:
        if dev.product_type == product_type:
            return f"{dev.display_name} ({product_type})"
    return product_type


def _irecv_chip_id(product_type: str | None) -> int | None:
    from pymobiledevice3.irecv_devices import IRECV_DEVICES

    return next((d.chip_id for d in IRECV_DEVICES if d.product_type == product_type), None)
