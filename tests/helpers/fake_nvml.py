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

    def __init__(self, gpus, broken=(), init_error=None, hang=None, v2_error=None, processes=None, processes_error=None):
        self.gpus = gpus
        # Per GPU index, a list of readings of its running compute processes, each a list of (pid, used bytes).
        self.processes = processes or {}
        self.processes_error = processes_error
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

    def nvmlDeviceGetPciInfo(self, handle):
        # NVML's busId: an 8-digit domain, as nvidia-smi prints it; buses 0x18, 0x2a, ... as on an HGX board.
        return PciInfo(b'00000000:%02X:00.0' % (0x18 + 0x12 * handle))

    def nvmlDeviceGetComputeRunningProcesses(self, handle):
        if self.processes_error:
            raise self.NVMLError(self.processes_error)
        readings = self.processes.get(handle, [[]])
        return [Process(pid, used) for pid, used in (readings.pop(0) if len(readings) > 1 else readings[0])]


class PciInfo(object):
    def __init__(self, bus_id):
        self.busId = bus_id


class Process(object):
    def __init__(self, pid, used):
        self.pid, self.usedGpuMemory = pid, used
