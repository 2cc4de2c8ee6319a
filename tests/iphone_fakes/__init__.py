"""A phone for the iPhone backend's tests, at pymobiledevice3's own seams (see ``phone``)."""

from iphone_fakes.phone import FakeConnector, FakeLockdown, FakePhone, make_ipa

__all__ = ["FakeConnector", "FakeLockdown", "FakePhone", "make_ipa"]
