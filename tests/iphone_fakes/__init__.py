"""A phone for the iPhone backend's tests, at pymobiledevice3's own seams (see ``phone``)."""

from iphone_fakes.phone import HARNESS, FakeConnector, FakeLockdown, FakePhone, make_device, make_ipa

__all__ = ["HARNESS", "FakeConnector", "FakeLockdown", "FakePhone", "make_device", "make_ipa"]
