"""A stand-in for nvidia-ml-py (pynvml): the few NVML calls gpu_release's NvmlReader makes."""

MIB = 1024 * 1024


class Memory(object):
    def __init__(self, used, total=143771 * MIB):
        self.used, self.total = used, total


class FakeNvml(object):
    """The few nvidia-ml-py calls NvmlReader makes; each GPU a list of used bytes, one per reading."""

    class NVMLError(Exception):
        pass

    nvmlMemory_v1 = 1
    nvmlMemory_v2 = 2

    def __init__(self, gpus, broken=(), init_error=None, hang=None, v2_error=None):
        self.gpus = gpus
        self.v2_error = v2_error
        self.broken = set(broken)
        self.init_error = init_error
        self.hang = hang
        self.versions = []
        self.shut = False

    def nvmlInit(self):
        if self.init_error:
            raise self.NVMLError(self.init_error)

    def nvmlShutdown(self):
        self.shut = True

    def nvmlDeviceGetCount(self):
        if self.hang is not None:
            self.hang.wait(5)
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index):
        if index in self.broken:
            raise self.NVMLError('GPU is lost')
        return index

    def nvmlDeviceGetUUID(self, handle):
        return b'GPU-%d' % handle

    def nvmlDeviceGetMemoryInfo(self, handle, version=None):
        self.versions.append(version)
        if self.v2_error and version == self.nvmlMemory_v2:
            raise self.NVMLError(self.v2_error)
        readings = self.gpus[handle]
        return Memory(readings.pop(0) if len(readings) > 1 else readings[0])
