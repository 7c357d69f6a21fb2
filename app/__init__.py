"""faultline: did this GPU training attempt fail because of the hardware or the code?"""
